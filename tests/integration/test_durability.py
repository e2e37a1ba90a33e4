"""Acknowledged data survives kill -9; torn or corrupt segment tails are cut at start-up."""

from __future__ import annotations

import glob
import os
import subprocess
import time

from confluent_kafka import Producer

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import consume_all, create_topic


def produce_acked(bootstrap: str, topic: str, n: int, partitions: int) -> dict[bytes, tuple[int, int]]:
    """Produce ``n`` records with acks=all; return value -> (partition, offset) of each ack."""
    acked: dict[bytes, tuple[int, int]] = {}

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                  "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"value-%06d" % i, partition=i % partitions,
                  on_delivery=on_delivery)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return acked


def test_kill9_after_acks_loses_nothing_and_duplicates_nothing(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 3)
    acked = produce_acked(b.bootstrap, topic_name, 6000, 3)
    assert len(acked) == 6000
    b.restart(kill=True)
    got = consume_all(b.bootstrap, topic_name, 3, expected=6000, timeout=30)
    seen = {m.value(): (m.partition(), m.offset()) for m in got}
    assert len(got) == len(seen) == 6000, "duplicates or losses after kill -9"
    assert seen == acked, "offsets changed across the crash"


def test_producing_continues_after_kill9_with_fresh_offsets(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    first = produce_acked(b.bootstrap, topic_name, 100, 1)
    b.restart(kill=True)
    second = produce_acked(b.bootstrap, topic_name, 100, 1)
    assert sorted(o for _, o in first.values()) == list(range(100))
    # Same values are produced again: new offsets continue after the old ones.
    assert sorted(o for _, o in second.values()) == list(range(100, 200))


def _active_segment(log_dir: str, topic: str, partition: int = 0) -> str:
    return sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log")))[-1]


def _batch_positions(path: str) -> list[tuple[int, rb.BatchHeader]]:
    with open(path, "rb") as f:
        return list(rb.iter_batches(f.read()))


def test_tail_cut_mid_batch_is_truncated_on_start(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    produce_acked(b.bootstrap, topic_name, 500, 1)
    b.kill9()
    seg = _active_segment(b.log_dir, topic_name)
    batches = _batch_positions(seg)
    last_pos, last = batches[-1]
    with open(seg, "r+b") as f:
        f.truncate(last_pos + last.size // 2)
    b.start()
    assert "log_truncated_on_recovery" in b.output()
    got = consume_all(b.bootstrap, topic_name, 1, expected=last.base_offset, timeout=20)
    assert [m.offset() for m in got] == list(range(last.base_offset))
    # The partition accepts new records right after the cut.
    more = produce_acked(b.bootstrap, topic_name, 10, 1)
    assert min(o for _, o in more.values()) == last.base_offset


def test_flipped_bytes_in_tail_are_truncated_on_start(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    produce_acked(b.bootstrap, topic_name, 500, 1)
    b.kill9()
    seg = _active_segment(b.log_dir, topic_name)
    batches = _batch_positions(seg)
    victim_pos, victim = batches[len(batches) // 2]
    with open(seg, "r+b") as f:
        f.seek(victim_pos + rb.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(victim_pos + rb.HEADER_SIZE + 3)
        f.write(bytes([byte[0] ^ 0x5A]))
    b.start()
    out = b.output()
    assert "log_truncated_on_recovery" in out
    got = consume_all(b.bootstrap, topic_name, 1, expected=victim.base_offset, timeout=20)
    assert [m.offset() for m in got] == list(range(victim.base_offset))


def test_clean_restart_keeps_everything(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 2)
    acked = produce_acked(b.bootstrap, topic_name, 1000, 2)
    b.restart()
    assert "log_truncated_on_recovery" not in b.output()
    got = consume_all(b.bootstrap, topic_name, 2, expected=1000, timeout=20)
    assert {m.value(): (m.partition(), m.offset()) for m in got} == acked


def test_a_second_broker_on_the_same_log_dir_refuses_to_start(own_broker, topic_name):
    """Kafka locks each log dir (``.lock``); a second broker names the directory and the holder."""
    first = own_broker()
    create_topic(first.bootstrap, topic_name)
    second = BrokerProcess(first.log_dir)
    res = subprocess.run(second.command(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    message = res.stderr.strip().splitlines()[-1]  # after the effective-config line
    assert message == (f"kbroker: log directory {os.path.abspath(first.log_dir)} is in use by another "
                       f"broker (pid {first.pid}); stop it or give this one another log.dirs"), res.stderr
    assert not os.path.exists(os.path.join(first.log_dir, ".kafka_cleanshutdown"))
    assert first.is_alive()
    produce_and_count(first.bootstrap, topic_name, 10)
    first.stop()
    assert os.path.exists(os.path.join(first.log_dir, ".kafka_cleanshutdown"))
    first.start()  # the lock went with the first process
    produce_and_count(first.bootstrap, topic_name, 10, expected=20)


def produce_and_count(bootstrap: str, topic: str, n: int, expected: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(30) == 0
    assert len(consume_all(bootstrap, topic, 1, expected or n)) == (expected or n)


def test_a_new_log_dir_is_not_an_unclean_shutdown(own_broker):
    b = own_broker()
    assert "clean_shutdown=True" in b.output() and "new=True" in b.output()


def test_a_tv2_transactions_offsets_and_sequences_survive_a_restart(own_broker, topic_name):
    """Transaction version 2 writes its markers at the bumped epoch: after kill -9 and after a
    clean stop, the committed offsets are still the group's (the reload commits offsets written
    at the epoch before the marker's), and the producer's next transaction, at that epoch,
    still has to start at sequence 0."""
    from tests.integration.test_transaction_version2 import (
        _end,
        _init,
        _produce,
        _txn_offset_commit,
        _wait_state,
        committed_offset,
    )
    from tests.support.raw import RawClient

    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    txn, group = f"{topic_name}-txn", f"{topic_name}-group"
    with RawClient(b.bootstrap) as c:
        pid, epoch = _init(c, txn)
        assert _produce(c, topic_name, txn, pid, epoch, 0) == 0
        assert _txn_offset_commit(c, txn, group, pid, epoch, topic_name, 42) == 0
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        _wait_state(c, txn, "CompleteCommit")
    for kill in (True, False):
        b.restart(kill=kill)
        with RawClient(b.bootstrap) as c:
            deadline = time.monotonic() + 20
            while (offset := committed_offset(c, group, topic_name)) != 42 and time.monotonic() < deadline:
                time.sleep(0.1)  # -1 while the offsets partition loads
            assert offset == 42, f"after {'kill -9' if kill else 'a clean stop'}: committed {offset}"
    with RawClient(b.bootstrap) as c:
        assert _produce(c, topic_name, txn, pid, epoch + 1, 1) == ErrorCode.out_of_order_sequence_number
        assert _produce(c, topic_name, txn, pid, epoch + 1, 0) == 0
