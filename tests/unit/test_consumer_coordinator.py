"""KIP-848 consumer groups in the group coordinator in-process (a real Broker object, real
timers): what is awkward to provoke through real clients, such as appends that fail or are held
while heartbeats and timers race, and the epoch checks of transactional offset commits.
"""

from __future__ import annotations

import pytest

from coordinator.group.consumer_coordinator import HeartbeatRequest
from coordinator.group.state import OffsetAndMetadata
from protocol.errors import ErrorCode as E
from tests.unit.test_group_coordinator import Harness


@pytest.fixture
async def harness(tmp_path):
    h = await Harness(str(tmp_path / "data"), **{"group.consumer.min.session.timeout.ms": "50"}).start()
    yield h
    await h.stop()


def _request(group: str, member_id: str, epoch: int, topics=("t",), **kw) -> HeartbeatRequest:
    fields = {"api_version": 1, "group_id": group, "member_id": member_id, "member_epoch": epoch,
              "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
              "subscribed_topic_names": None if topics is None else list(topics),
              "subscribed_topic_regex": None, "server_assignor": None, "owned": {} if epoch == 0 else None,
              "client_id": "c", "client_host": "/127.0.0.1"}
    fields.update(kw)
    return HeartbeatRequest(**fields)


async def _join(h: Harness, group: str = "g", member_id: str = "m1") -> int:
    resp = await h.coordinator.consumer.heartbeat(_request(group, member_id, 0))
    assert resp["error_code"] == 0, resp
    return resp["member_epoch"]


async def test_txn_offset_commit_with_a_stale_member_epoch_is_illegal_generation(harness):
    """Kafka's validateTransactionalOffsetCommit turns StaleMemberEpochException into
    ILLEGAL_GENERATION, which the producer aborts on (STALE_MEMBER_EPOCH would be fatal)."""
    h = harness
    h.create_topic("t", 1)
    epoch = await _join(h)

    async def txn_commit(member_id: str, member_epoch: int) -> int:
        result = await h.coordinator.txn_offset_commit(
            group_id="g", producer_id=7, producer_epoch=0, member_id=member_id, group_instance_id=None,
            generation_id=member_epoch, offsets={("t", 0): OffsetAndMetadata(1, -1, "")})
        return result[("t", 0)]

    assert await txn_commit("m1", epoch + 1) == E.illegal_generation
    assert await txn_commit("m1", epoch - 1) == E.illegal_generation
    assert await txn_commit("nobody", epoch) == E.unknown_member_id
    assert await txn_commit("m1", epoch) == 0
