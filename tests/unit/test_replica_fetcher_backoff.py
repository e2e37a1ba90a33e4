"""A follower's fetcher backs off from a partition answered with an error, not from all of
them (broker.replica_fetcher.ReplicaFetcher, as Kafka's delayed partitions): the partition
leaves the fetch session and comes back once ``replica.fetch.backoff.ms`` has passed."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest

from broker.config import load_config
from broker.partition import Partition
from broker.replica_fetcher import ReplicaFetcher
from protocol.errors import ErrorCode
from storage.log import Log, LogConfig

CONFIG = load_config({"replica.fetch.backoff.ms": "1000"})


@pytest.fixture
def followed(tmp_path):
    parts, topic_id = [], uuid.uuid4()
    for index in (0, 1):
        log, _ = Log.open(tmp_path / f"t-{index}", "t", index, LogConfig())
        part = Partition("t", index, topic_id, log, node_id=2)
        part.make_follower(1, leader_epoch=3, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
        parts.append(part)
    yield parts
    for part in parts:
        part.log.close()


def _answer(index: int, error: ErrorCode = ErrorCode.none):
    return SimpleNamespace(partition_index=index, error_code=int(error), diverging_epoch=None, records=b"",
                           high_watermark=0, log_start_offset=0)


def _names(fetcher, request) -> tuple[set, set]:
    """(sent, forgotten) partitions of a request, by topic name (the request names topic ids)."""
    name = fetcher.topic_names
    sent = {(name[t.topic_id], p.partition) for t in request.topics for p in t.partitions}
    forgotten = {(name[t.topic_id], i) for t in request.forgotten_topics_data for i in t.partitions}
    return sent, forgotten


def _run(followed, scenario) -> None:
    """``scenario(fetcher)`` on a fetcher of the followed partitions whose task is stopped, so
    the test drives its requests and answers; after the first request, answered with a session."""
    async def main():
        fetcher = ReplicaFetcher(2, 1, lambda node: None, CONFIG, on_fetched=lambda part: None)
        fetcher.task.cancel()
        try:
            for part in followed:
                fetcher.add(part)
            first = fetcher._build_request()
            assert _names(fetcher, first)[0] == {("t", 0), ("t", 1)} and first.session_epoch == 0
            fetcher.session.handle_response(0, 77)
            scenario(fetcher)
        finally:
            await fetcher.stop()
    asyncio.run(main())


def test_an_erroring_partition_backs_off_alone_and_comes_back(followed):
    def scenario(fetcher):
        fetcher._process([(followed[0].topic_id, [_answer(0, ErrorCode.not_leader_or_follower), _answer(1)])])
        assert set(fetcher.delayed) == {("t", 0)}
        assert fetcher._release_delayed() == 0  # partition 1 still fetches: no global backoff
        sent, forgotten = _names(fetcher, fetcher._build_request())
        assert forgotten == {("t", 0)} and ("t", 0) not in sent

        fetcher.delayed[("t", 0)] = time.monotonic() - 1  # its backoff is over
        assert fetcher._release_delayed() == 0 and not fetcher.delayed
        fetcher.session.handle_response(0, 77)
        sent, forgotten = _names(fetcher, fetcher._build_request())
        assert ("t", 0) in sent and not forgotten
    _run(followed, scenario)


def test_when_every_partition_backs_off_the_fetcher_waits_for_the_first(followed):
    def scenario(fetcher):
        fetcher._process([(followed[0].topic_id, [_answer(0, ErrorCode.unknown_topic_or_partition),
                                                  _answer(1, ErrorCode.not_leader_or_follower)])])
        assert 0 < fetcher._release_delayed() <= 1.0
        fetcher.add(followed[0])  # given again (a new leader epoch): fetched at once
        assert fetcher._release_delayed() == 0 and ("t", 0) not in fetcher.delayed
    _run(followed, scenario)


def test_a_topic_made_again_under_its_name_is_forgotten_under_its_old_id(followed, tmp_path):
    """Deleted and created again with the same name, a partition has a new topic id: the
    leader's session holds the old one, so the old is what the follower forgets, and an
    answer for the old id is not applied to the new partition."""
    def scenario(fetcher):
        old_id = followed[0].topic_id
        log, _ = Log.open(tmp_path / "t-0-new", "t", 0, LogConfig())
        again = Partition("t", 0, uuid.uuid4(), log, node_id=2)
        again.make_follower(1, leader_epoch=3, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
        try:
            fetcher.remove(followed[0])
            fetcher.add(again)
            request = fetcher._build_request()
            assert [(t.topic_id, tuple(t.partitions)) for t in request.forgotten_topics_data] == [(old_id, (0,))]
            assert [t.topic_id for t in request.topics] == [again.topic_id]
            fetcher._process([(old_id, [_answer(0, ErrorCode.unknown_topic_id)])])
            assert not fetcher.delayed  # the old topic's error is not the new partition's
        finally:
            log.close()
    _run(followed, scenario)
