"""Coordinator plumbing without a broker: partition ownership by epoch, loading and writing at
an epoch, load progress, and KIP-890 verification batched per coordinator node (a fake
inter-broker client)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from structlog.testing import capture_logs

from broker.txn_verification import AddPartitionsToTxnManager
from coordinator.runtime import (
    LoadProgress,
    PartitionOwnership,
    append_error,
    append_then_apply,
    load_partition,
)
from protocol.errors import ErrorCode as E
from tests.support.loop import settle


def test_ownership_follows_elections_by_epoch():
    o = PartitionOwnership()
    assert o.status(3) == E.not_coordinator
    assert o.begin_load(3, 5)
    assert not o.begin_load(3, 5)  # the same election twice
    assert o.status(3) == E.coordinator_load_in_progress and o.epoch(3) is None
    assert o.finish_load(3, 5, ok=True)
    assert o.status(3) == 0 and o.is_current(3, 5)
    assert not o.resign(3, 4)  # an older resignation does not unload a newer election
    assert o.is_current(3, 5)
    assert o.begin_load(3, 6)  # re-elected at a newer epoch: loading again
    assert not o.finish_load(3, 5, ok=True)  # the old load's completion is ignored
    assert o.resign(3, 6) and o.status(3) == E.not_coordinator
    assert not o.finish_load(3, 6, ok=True)  # resigned while loading: never owned


async def test_a_load_is_applied_only_at_the_epoch_it_was_elected_at():
    o, applied = PartitionOwnership(), []
    o.begin_load(0, 5)
    assert await load_partition(o, 0, 5, lambda: "replay", lambda r: applied.append(r) or len(applied),
                                topic="t") == 1
    assert applied == ["replay"] and o.is_current(0, 5)

    # Re-elected at 7 while the replay of 6 ran (in its worker thread): 6's replay is dropped,
    # and the partition stays loading for 7's own load.
    o.begin_load(1, 6)
    reading, release = threading.Event(), threading.Event()

    def slow_read():
        reading.set()
        release.wait(5)
        return "stale"

    load = asyncio.ensure_future(load_partition(o, 1, 6, slow_read, applied.append, topic="t"))
    while not reading.is_set():
        await asyncio.sleep(0.001)
    o.begin_load(1, 7)
    release.set()
    assert await load is None and "stale" not in applied
    assert o.status(1) == E.coordinator_load_in_progress

    # A replay that cannot be applied leaves the partition unowned, not loading forever.
    o.begin_load(2, 1)
    assert await load_partition(o, 2, 1, lambda: "bad", lambda r: 1 / 0, topic="t") is None
    assert o.status(2) == E.not_coordinator


async def test_a_write_is_applied_only_if_the_epoch_is_unchanged_when_its_append_completes():
    o, applied = PartitionOwnership(), []
    o.own(0, 3)
    gate = asyncio.Event()

    async def append(code=0):
        await gate.wait()
        return code

    write = asyncio.ensure_future(append_then_apply(o, 0, append, lambda: applied.append("w")))
    await settle()
    o.resign(0, 3)
    o.begin_load(0, 4)
    o.finish_load(0, 4, ok=True)   # moved away and back while the append was in flight
    gate.set()
    assert await write == E.not_coordinator and applied == []
    assert await append_then_apply(o, 0, append, lambda: applied.append("w")) == 0 and applied == ["w"]
    assert await append_then_apply(o, 0, lambda: append(E.not_enough_replicas)) == E.coordinator_not_available
    assert await append_then_apply(o, 1, append) == E.not_coordinator            # never owned
    o.begin_load(0, 5)
    assert await append_then_apply(o, 0, append) == E.coordinator_load_in_progress


def test_append_errors_map_as_kafka_maps_them():
    assert append_error(E.not_enough_replicas) == E.coordinator_not_available
    assert append_error(E.request_timed_out) == E.coordinator_not_available
    assert append_error(E.not_leader_or_follower) == E.not_coordinator
    assert append_error(E.message_too_large, too_large=E.invalid_commit_offset_size) == E.invalid_commit_offset_size


class FakeClient:
    """Answers AddPartitionsToTxn v4 with every partition OK, after a gate opens."""

    def __init__(self, fail: bool = False) -> None:
        self.requests: list[dict] = []
        self.gate = asyncio.Event()
        self.fail = fail

    async def send_request(self, node_id, api_key, api_version, request, timeout=None):
        self.requests.append(request)
        await self.gate.wait()
        if self.fail:
            raise ConnectionError("refused")
        return SimpleNamespace(error_code=0, results_by_transaction=[
            SimpleNamespace(transactional_id=t["transactional_id"], topic_results=[
                SimpleNamespace(name=tp["name"], results_by_partition=[
                    SimpleNamespace(partition_index=p, partition_error_code=0) for p in tp["partitions"]])
                for tp in t["topics"]])
            for t in request["transactions"]])


async def test_verifications_for_one_node_share_a_request_and_the_next_waits():
    client = FakeClient()
    m = AddPartitionsToTxnManager(client)
    a = asyncio.ensure_future(m.verify(2, "a", 10, 0, [("t", 0)]))
    b = asyncio.ensure_future(m.verify(2, "b", 11, 0, [("t", 1)]))
    a2 = asyncio.ensure_future(m.verify(2, "a", 10, 0, [("t", 2)]))  # merges with a
    await settle()
    assert len(client.requests) == 1
    sent = {t["transactional_id"]: t for t in client.requests[0]["transactions"]}
    assert set(sent) == {"a", "b"} and sent["a"]["topics"] == [{"name": "t", "partitions": [0, 2]}]
    late = asyncio.ensure_future(m.verify(2, "c", 12, 0, [("t", 0)]))  # waits for the next request
    await settle()
    assert len(client.requests) == 1
    client.gate.set()
    assert await a == {("t", 0): 0} and await a2 == {("t", 2): 0} and await b == {("t", 1): 0}
    assert await late == {("t", 0): 0}
    assert len(client.requests) == 2


async def test_an_older_producer_epoch_queued_beside_a_newer_one_is_fenced():
    client = FakeClient()
    m = AddPartitionsToTxnManager(client)
    first = asyncio.ensure_future(m.verify(1, "x", 7, 0, [("t", 0)]))
    await settle()  # in flight; the next two queue
    newer = asyncio.ensure_future(m.verify(1, "x", 7, 3, [("t", 0)]))
    await asyncio.sleep(0)
    assert await m.verify(1, "x", 7, 2, [("t", 1)]) == {("t", 1): E.invalid_producer_epoch}
    client.gate.set()
    assert await first == {("t", 0): 0} and await newer == {("t", 0): 0}


async def test_an_unreachable_coordinator_is_retriable():
    client = FakeClient(fail=True)
    client.gate.set()
    m = AddPartitionsToTxnManager(client)
    assert await m.verify(3, "y", 1, 0, [("t", 0)]) == {("t", 0): E.coordinator_not_available}


def test_load_progress_reports_at_most_every_interval_and_totals_at_the_end():
    now = [100.0]
    with capture_logs() as logs:
        progress = LoadProgress("group_metadata", "__consumer_offsets", 3, interval_s=2.0, clock=lambda: now[0])
        progress.report(0, groups=0)
        now[0] += 2.5
        progress.report(1, groups=4)
        now[0] += 1.0
        progress.report(2, groups=6)  # within the interval of the last report
        progress.finished(groups=7, offsets=9)
    events = [(e["event"], e.get("partitions_loaded"), e.get("groups")) for e in logs]
    assert events == [("group_metadata_load_started", None, None), ("group_metadata_load_progress", 1, 4),
                      ("group_metadata_load_finished", None, 7)]
    assert logs[-1]["seconds"] == 3.5 and logs[-1]["log_level"] == "info"


def test_a_quiet_load_that_brings_nothing_is_a_debug_line():
    with capture_logs() as logs:
        LoadProgress("group_metadata", "__consumer_offsets", 1, quiet=True).finished(groups=0, offsets=0)
        LoadProgress("group_metadata", "__consumer_offsets", 1, quiet=True).finished(groups=1, offsets=0)
    assert [e["log_level"] for e in logs] == ["debug", "debug", "debug", "info"]
