"""Coordinator plumbing without a broker: partition ownership by epoch, load progress, and
KIP-890 verification batched per coordinator node (a fake inter-broker client)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from structlog.testing import capture_logs

from broker.txn_verification import AddPartitionsToTxnManager
from coordinator.runtime import LoadProgress, PartitionOwnership, append_error
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
