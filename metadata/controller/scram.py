"""SCRAM credential records: what AlterUserScramCredentials changes.

Owns applying a request's deletions and upsertions to the stored credentials, all users of a
request together or none (Kafka's ScramControlManager.alterCredentials, whose checks are
:func:`security.scram.plan_alterations`'), and the write of the users' new credential sets.

Differs from Kafka: a user's credentials are one record (every mechanism together).
"""

from __future__ import annotations

from collections.abc import Iterable

from security import scram

from ..image import MetadataCache
from . import settled

__all__ = ["ScramControlManager"]


class ScramControlManager:
    def __init__(self, image: MetadataCache, store) -> None:
        self.image = image
        self.store = store

    async def alter(self, deletions: Iterable, upsertions: Iterable) -> list[scram.Outcome]:
        """One outcome per user named; the changes are written only if some user's changed."""
        changes, outcomes = scram.plan_alterations(self.image.scram_credentials, deletions, upsertions)
        if changes:
            await settled(self.store.alter_scram_credentials(changes))
        return outcomes
