"""ACL records: what CreateAcls adds to and DeleteAcls removes from the cluster's ACLs.

Owns the write of ACL bindings, each under an id derived from its content, so the same ACL
created twice is one record and its creation a success (as Kafka's AclControlManager answers).
Validation of a binding and matching of filters are :mod:`security.acls`'; the authorizer takes
the image's ACLs whenever they change.

Differs from Kafka: an ACL's id is its content's digest, not a random Uuid.
"""

from __future__ import annotations

from security.acls import StandardAcl

from . import settled

__all__ = ["AclControlManager"]


class AclControlManager:
    def __init__(self, store) -> None:
        self.store = store

    async def create(self, acls: list[StandardAcl]) -> None:
        await settled(self.store.create_acls(acls))

    async def delete(self, acl_ids: set[str]) -> None:
        if acl_ids:
            await settled(self.store.delete_acls(acl_ids))
