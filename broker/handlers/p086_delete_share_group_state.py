"""DeleteShareGroupState: v0 (KIP-932, inter-broker)

Behavior:
- The share coordinator (``coordinator/share/persister.py``) forgets each share-partition's
  state: a tombstone appended to ``__share_group_state`` with acks=all. NOT_COORDINATOR where
  another broker leads the state partition, COORDINATOR_LOAD_IN_PROGRESS while it is replayed.
- With an authorizer: CLUSTER_ACTION on the cluster (a broker's request), else
  CLUSTER_AUTHORIZATION_FAILED for every partition.

Version notes:
- v0 only.
"""

from protocol.api import register

from .. import share_requests as sr
from ..authorization import AclOperation, authorize_cluster, refused_state_request
from ..request_context import RequestContext


@register(86, 0, 0)
async def handle_delete_share_group_state(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return refused_state_request(request)
    return await sr.write_states(ctx, request, lambda _partition: None)
