"""KIP-848 consumer groups in the group coordinator in-process (a real Broker object, timers on
the harness's fake clock): what is awkward to provoke through real clients, such as appends that fail or are held
while heartbeats and timers race, and the epoch checks of transactional offset commits.
"""

from __future__ import annotations

import asyncio

import pytest

from coordinator.group.consumer_coordinator import HeartbeatRequest
from coordinator.group.state import OffsetAndMetadata
from protocol.errors import ErrorCode as E
from tests.unit.test_group_coordinator import Harness, _gate_appends, settle, wait_loaded

SESSION_MS = 1000


@pytest.fixture
async def harness(tmp_path):
    h = await Harness(str(tmp_path / "data"), **{"group.consumer.min.session.timeout.ms": "50",
                                                 "group.consumer.session.timeout.ms": str(SESSION_MS)}).start()
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


async def _until(h: Harness, condition, timeout_ms: int = SESSION_MS) -> None:
    """Advance the fake clock 10 ms at a time (letting what fired run) until ``condition``."""
    for _ in range(timeout_ms // 10):
        if condition():
            return
        h.timer.advance(10)
        await settle()
    raise AssertionError("condition not reached")


def _members(h: Harness, group: str = "g") -> set[str]:
    holder = h.coordinator.groups.get(group)
    return set() if holder is None or holder.consumer is None else set(holder.consumer.members)


async def test_txn_offset_commit_with_a_stale_member_epoch_is_illegal_generation(harness):
    """Kafka's validateTransactionalOffsetCommit turns StaleMemberEpochException into
    ILLEGAL_GENERATION, which the producer aborts on (STALE_MEMBER_EPOCH would be fatal)."""
    h = harness
    h.create_topic("t", 1)
    epoch = await _join(h)

    async def txn_commit(member_id: str, member_epoch: int) -> int:
        result = await h.coordinator.offsets.txn_offset_commit(
            group_id="g", producer_id=7, producer_epoch=0, member_id=member_id, group_instance_id=None,
            generation_id=member_epoch, offsets={("t", 0): OffsetAndMetadata(1, -1, "")})
        return result[("t", 0)]

    assert await txn_commit("m1", epoch + 1) == E.illegal_generation
    assert await txn_commit("m1", epoch - 1) == E.illegal_generation
    assert await txn_commit("nobody", epoch) == E.unknown_member_id
    assert await txn_commit("m1", epoch) == 0


async def test_a_heartbeat_handled_after_the_session_timer_fired_keeps_the_member(harness):
    """The session timer of m1 fires while a heartbeat of m1 waits for the group (another
    member's append is in flight); the heartbeat reschedules the timer, so the expiry that
    runs after it must not fence m1 (Kafka's timer write event checks its task is current)."""
    h = harness
    h.create_topic("t", 2)
    epoch = await _join(h, member_id="m1")
    gate = _gate_appends(h)
    joining = asyncio.ensure_future(h.coordinator.consumer.heartbeat(_request("g", "m2", 0)))
    await settle()  # m2's join holds the group, its append held
    beat = asyncio.ensure_future(h.coordinator.consumer.heartbeat(_request("g", "m1", epoch, topics=None)))
    h.timer.advance(SESSION_MS + 100)  # m1's session timer fires meanwhile
    await settle()
    gate.set()
    assert (await joining)["error_code"] == 0
    assert (await beat)["error_code"] == 0
    # The expiries run in the order the timers fired, m1's then m2's (which fences m2: nothing
    # rescheduled its timer); m1's new timer fires a session later.
    await _until(h, lambda: "m2" not in _members(h))
    assert _members(h) == {"m1"}


def _fail_appends(h: Harness) -> list[bool]:
    """Fail every ``__consumer_offsets`` append (NOT_ENOUGH_REPLICAS) while ``failing[0]``."""
    failing = [True]
    real = h.coordinator.s.append_at

    async def append_at(*args, **kwargs):
        if failing[0]:
            return E.not_enough_replicas, -1
        return await real(*args, **kwargs)

    h.coordinator.s.append_at = append_at
    return failing


async def test_a_member_whose_leave_was_not_written_still_expires(harness):
    """The leave cancelled the member's timers; the failed append restores the member, and
    with it its session timer: it is fenced a session later."""
    h = harness
    h.create_topic("t", 1)
    await _join(h, member_id="m1")
    failing = _fail_appends(h)
    resp = await h.coordinator.consumer.heartbeat(_request("g", "m1", -1, topics=None))
    assert resp["error_code"] != 0
    assert _members(h) == {"m1"}
    failing[0] = False
    await _until(h, lambda: not _members(h), timeout_ms=2 * SESSION_MS)


async def test_a_failed_rebalance_expiry_keeps_the_rebalance_timer(harness):
    """m1 must revoke a partition for m2 and does not within its rebalance timeout; the fence's
    append fails: m1 is restored with its rebalance timer, and fenced at the next one (well
    before its session times out)."""
    h = harness
    h.create_topic("t", 2)
    resp = await h.coordinator.consumer.heartbeat(_request("g", "m1", 0, rebalance_timeout_ms=200))
    epoch = resp["member_epoch"]
    owned = {tp["topic_id"]: frozenset(tp["partitions"]) for tp in resp["assignment"]["topic_partitions"]}
    assert sum(len(ps) for ps in owned.values()) == 2
    await _join(h, member_id="m2")
    resp = await h.coordinator.consumer.heartbeat(_request("g", "m1", epoch, topics=None, owned=owned,
                                                            rebalance_timeout_ms=-1))
    assert resp["error_code"] == 0 and resp["member_epoch"] == epoch  # revoking: still at its epoch
    failing = _fail_appends(h)
    h.timer.advance(300)  # the rebalance timeout fires and the fence is not written
    await settle()
    assert "m1" in _members(h)
    failing[0] = False
    await _until(h, lambda: "m1" not in _members(h), timeout_ms=600)


async def test_group_locks_live_only_while_held_or_awaited(harness):
    h = harness
    h.create_topic("t", 1)
    resp = await h.coordinator.consumer.heartbeat(_request("missing", "m1", 5, topics=None))
    assert resp["error_code"] == E.group_id_not_found
    await _join(h, member_id="m1")
    assert h.coordinator.consumer._locks == {}


def _gate_first_append(h: Harness) -> asyncio.Event:
    """Hold the next ``__consumer_offsets`` append (only that one) until the event is set."""
    gate = asyncio.Event()
    real = h.coordinator.s.append_at
    calls = []

    async def append_at(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            await gate.wait()
        return await real(*args, **kwargs)

    h.coordinator.s.append_at = append_at
    return gate


async def test_a_late_failed_append_leaves_the_reloaded_group_alone(harness):
    """m1's leave is in flight when the partition is unloaded and loaded again; m2 joins the
    reloaded group after it (the group's lock is not dropped while held), and the leave's failed
    append does not put its snapshot over the reloaded group."""
    h = harness
    h.create_topic("t", 2)
    await _join(h, member_id="m1")
    gate = _gate_first_append(h)
    partition = h.coordinator.partition_for("g")
    epoch = h.coordinator.ownership.epoch(partition)
    leave = asyncio.ensure_future(h.coordinator.consumer.heartbeat(_request("g", "m1", -1, topics=None)))
    await settle()
    h.coordinator.on_resign(partition, epoch)
    h.coordinator.on_become_leader(partition, epoch + 1)
    await wait_loaded(h, partition)
    assert _members(h) == {"m1"}
    join = asyncio.ensure_future(h.coordinator.consumer.heartbeat(_request("g", "m2", 0)))
    await settle()
    gate.set()
    assert (await leave)["error_code"] != 0
    assert (await join)["error_code"] == 0
    assert _members(h) == {"m1", "m2"}
