"""Many clients on one broker: 2000 idle connections each still answered, and what they cost in
memory bounded; 500 concurrent transactional producers, each with a transaction open at once,
all committed and read back under read_committed.

The memory bound is loose on purpose (``bench/clients_bench.py`` measures the figure, about 4 KB
per idle connection): it catches a connection that came to hold a buffer or a task it should
not, not a few bytes more.
"""

from __future__ import annotations

import resource
import time
import uuid

import pytest
from confluent_kafka import Producer

from tests.support import eos
from tests.support.clients import create_topic
from tests.support.raw import RawClient

CONNECTIONS = 2000
PRODUCERS = 500
KB_PER_IDLE_CONNECTION_BOUND = 64
API_VERSIONS = {"client_software_name": "many-clients", "client_software_version": "1"}


@pytest.fixture(autouse=True)
def _descriptors():
    """This process needs a descriptor per connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < CONNECTIONS + 200:
        pytest.fail(f"RLIMIT_NOFILE's hard limit {hard} is below the {CONNECTIONS} connections this test opens")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _settled_rss_kb(pid: int) -> int:
    """The broker's resident set once it stops moving (its allocator returns freed pages late)."""
    last = _rss_kb(pid)
    for _ in range(20):
        time.sleep(0.25)
        now = _rss_kb(pid)
        if abs(now - last) < 256:
            return now
        last = now
    return last


def test_two_thousand_idle_connections_are_each_answered_and_cost_little(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    before = _settled_rss_kb(b.pid)
    clients: list[RawClient] = []
    try:
        for _ in range(CONNECTIONS):
            c = RawClient(b.bootstrap, timeout=30)
            assert c.call(18, 3, API_VERSIONS).error_code == 0
            clients.append(c)
        per_connection = (_settled_rss_kb(b.pid) - before) / CONNECTIONS
        assert per_connection < KB_PER_IDLE_CONNECTION_BOUND, f"{per_connection:.1f} KB per idle connection"

        # Another client produces and reads back while they are all open...
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
        p.produce(topic_name, value=b"while-idle")
        assert p.flush(30) == 0
        # ...and every idle connection is still served, first to last.
        for c in clients[::-1]:
            md = c.call(3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
            assert md.topics[0].error_code == 0
    finally:
        for c in clients:
            c.close()


def test_five_hundred_transactional_producers_with_transactions_open_at_once(own_broker, topic_name):
    b = own_broker()
    partitions = 10
    create_topic(b.bootstrap, topic_name, partitions)
    conns = [RawClient(b.bootstrap, timeout=60) for _ in range(50)]
    opened = []
    try:
        for i in range(PRODUCERS):
            c = conns[i % len(conns)]
            tid = f"many-{uuid.uuid4().hex[:12]}"
            init = eos.init_producer_id(c, tid)
            assert init.error_code == 0, init
            pid, epoch = init.producer_id, init.producer_epoch
            added = eos.add_partitions(c, tid, pid, epoch, {topic_name: [i % partitions]})
            assert set(added.values()) == {0}, added
            records = eos.batch([b"p%03d" % i], pid, epoch, 0, transactional=True)
            assert eos.produce(c, topic_name, records, tid, partition=i % partitions).error_code == 0
            opened.append((c, tid, pid, epoch))
        assert len({pid for _, _, pid, _ in opened}) == PRODUCERS  # a producer id each

        # All 500 open at once: the last stable offset of every partition is still at its start.
        for part in range(partitions):
            assert eos.lso_hw(b.bootstrap, topic_name, part) == (0, PRODUCERS // partitions)
        for c, tid, pid, epoch in opened:
            assert eos.end_txn(c, tid, pid, epoch, commit=True) == 0
    finally:
        for c in conns:
            c.close()
    for part in range(partitions):  # each commit's marker written: nothing left open
        eos.wait_until(lambda part=part: (lambda lso, hw: lso == hw == 2 * PRODUCERS // partitions)(
            *eos.lso_hw(b.bootstrap, topic_name, part)), 60, f"partition {part} stable at its end")
    got = eos.drain(b.bootstrap, topic_name, partitions, isolation="read_committed")
    assert sorted(eos.values_of(got)) == [b"p%03d" % i for i in range(PRODUCERS)]
