"""WriteShareGroupState: v0-1 (KIP-932, inter-broker)

Behavior:
- The share coordinator (``coordinator/share/persister.py``) replaces the state of each
  share-partition with the one sent (a full snapshot), appended to ``__share_group_state``
  with acks=all before it answers. NOT_COORDINATOR where another broker leads the state
  partition, COORDINATOR_LOAD_IN_PROGRESS while it is replayed, COORDINATOR_NOT_AVAILABLE
  when the append fails.
- With an authorizer: CLUSTER_ACTION on the cluster (a broker's request), else
  CLUSTER_AUTHORIZATION_FAILED for every partition.

Version notes:
- v1 adds ``delivery_complete_count`` (KIP-1226): not stored, it is recomputed from the
  batches.
"""

from coordinator.share.partition import PersistedState, RecordState, StateBatch
from protocol.api import register

from .. import share_requests as sr
from ..authorization import AclOperation, authorize_cluster, refused_state_request
from ..request_context import RequestContext


@register(85, 0, 1)
async def handle_write_share_group_state(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return refused_state_request(request)
    return await sr.write_states(ctx, request, _state)


def _state(p) -> PersistedState:
    return PersistedState(p.start_offset, p.state_epoch, p.leader_epoch, [
        StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
        for b in p.state_batches])
