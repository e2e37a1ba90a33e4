"""EOS acceptance 8: hanging transactions and the transactions CLI.

A hanging transaction: with KIP-890 partition verification off, a raw transactional
Produce from a producer id the coordinator does not know (no InitProducerId for its
transactional id, no AddPartitionsToTxn) opens a transaction on the partition that no
coordinator will ever end. DescribeProducers (API 61) shows it with its start offset, the
LSO is stuck there (records committed after it stay invisible to read_committed), the
transactions CLI (``python -m tools.transactions --bootstrap-server B``) lists it
under ``find-hanging`` (and does not list a live producer's open transaction, which its
coordinator knows), ``abort --start-offset`` clears it, and the LSO advances.

A killed producer's open transaction is not hanging: its coordinator knows it (find-hanging
does not list it) and aborts it on transaction.timeout.ms, which releases the LSO.

The CLI tests are xfail(strict) while ``tools.transactions`` does not exist, so they
start failing (XPASS) the moment it lands and the marker must go.
The broker runs with transaction.partition.verification.enable=false and a 1 s abort scan.
Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka (same config), else our broker.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from protocol.errors import ErrorCode
from tests.support import eos_accept
from tests.support.eos_accept import (
    ABORT_SCAN_MS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    add_partitions,
    batch,
    cf_producer,
    create_topic,
    describe_producers,
    describe_transaction,
    drain,
    end_txn,
    init_producer_id,
    list_offset,
    now_ms,
    produce,
    raw,
    txn_state,
    values_of,
    wait_stable,
    wait_until,
)

EOS_BROKER_CONFIG = {
    "transaction.partition.verification.enable": "false",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_SCAN_MS),
}

eos_broker = eos_accept.eos_broker  # the module's broker fixture

TOOL = "tools.transactions"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_tool = pytest.mark.xfail(importlib.util.find_spec(TOOL) is None, strict=True,
                               reason=f"{TOOL} (the transactions CLI) does not exist yet")

OLD = 20 * 60 * 1000  # a CreateTime 20 minutes back: older than the tool's default 15 min


def cli(bs: str, *args: str, ok: bool = True) -> list[dict[str, str]]:
    """Run the CLI; parse its table (header row, then rows, whitespace-separated)."""
    r = subprocess.run([sys.executable, "-m", TOOL, "--bootstrap-server", bs, *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0].split()
    return [dict(zip(header, ln.split())) for ln in lines[1:]]


def producer_entry(c, topic: str, pid: int):
    return next((p for p in describe_producers(c, topic) if p.producer_id == pid), None)


@needs_tool
def test_hanging_transaction_found_and_aborted_with_the_cli(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    ghost_id, live_id = f"{topic_name}-ghost", f"{topic_name}-live"
    with raw(bs) as c:
        # the hanging transaction: a producer id the coordinator has never seen for ghost_id
        ghost = init_producer_id(c, None).producer_id
        r = produce(c, topic_name, batch([b"hang0", b"hang1"], ghost, 0, 0, transactional=True,
                                         timestamp=now_ms() - OLD), ghost_id)
        assert (r.error_code, r.base_offset) == (ErrorCode.none, 0), r
        # a live transaction, just as old by its records' CreateTime, that its coordinator knows
        lr = init_producer_id(c, live_id)
        live, le = lr.producer_id, lr.producer_epoch
        assert add_partitions(c, live_id, live, le, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        r = produce(c, topic_name, batch([b"live"], live, le, 0, transactional=True, timestamp=now_ms() - OLD),
                    live_id)
        assert (r.error_code, r.base_offset) == (ErrorCode.none, 2), r
    # committed after the hanging one began
    p = cf_producer(bs, f"{topic_name}-ok")
    p.init_transactions(30)
    p.begin_transaction()
    for v in (b"c0", b"c1"):
        p.produce(topic_name, v, partition=0)
    p.commit_transaction(30)

    with raw(bs) as c:
        wait_until(lambda: list_offset(c, topic_name, 0, READ_UNCOMMITTED) == 6, 15, "c0, c1 and their COMMIT")
        e = producer_entry(c, topic_name, ghost)
        assert e is not None and e.current_txn_start_offset == 0 and e.last_sequence == 1, e
        assert producer_entry(c, topic_name, live).current_txn_start_offset == 2
        assert list_offset(c, topic_name, 0, READ_COMMITTED) == 0, "the hanging transaction must hold the LSO"
    assert values_of(drain(bs, topic_name)) == []

    rows = cli(bs, "describe-producers", "--topic", topic_name, "--partition", "0")
    by_pid = {int(r["ProducerId"]): r for r in rows}
    assert by_pid[ghost]["CurrentTransactionStartOffset"] == "0", rows
    hanging = cli(bs, "find-hanging", "--topic", topic_name)
    assert [(r["Topic"], r["Partition"], int(r["ProducerId"]), r["StartOffset"]) for r in hanging] == \
        [(topic_name, "0", ghost, "0")], hanging
    listed = cli(bs, "list")
    assert live_id in {r["TransactionalId"] for r in listed} and ghost not in {int(r["ProducerId"]) for r in listed}

    assert cli(bs, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "0") == []

    with raw(bs) as c:
        wait_until(lambda: list_offset(c, topic_name, 0, READ_COMMITTED) == 2, 15,
                   "the LSO to advance to the live transaction")
        assert producer_entry(c, topic_name, ghost).current_txn_start_offset == -1
    assert cli(bs, "find-hanging", "--topic", topic_name) == []
    with raw(bs) as c:
        assert end_txn(c, live_id, live, le, commit=True) == ErrorCode.none
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"live", b"c0", b"c1"]
    assert values_of(drain(bs, topic_name, isolation="read_uncommitted")) == [b"hang0", b"hang1", b"live",
                                                                              b"c0", b"c1"]


def test_hanging_transaction_holds_lso_and_is_described(eos_broker, topic_name):
    """The wire half of the above, without the CLI: DescribeProducers shows the unknown
    producer's open transaction and the LSO stays at its first offset while other
    transactions commit after it; no timeout ever ends it (no coordinator knows it)."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with raw(bs) as c:
        ghost = init_producer_id(c, None).producer_id
        r = produce(c, topic_name, batch([b"hang"], ghost, 3, 0, transactional=True), f"{topic_name}-ghost")
        assert (r.error_code, r.base_offset) == (ErrorCode.none, 0), r
    p = cf_producer(bs, f"{topic_name}-ok")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic_name, b"c0", partition=0)
    p.commit_transaction(30)
    with raw(bs) as c:
        wait_until(lambda: list_offset(c, topic_name, 0, READ_UNCOMMITTED) == 3, 15, "c0 and its COMMIT")
        e = producer_entry(c, topic_name, ghost)
        assert (e.producer_epoch, e.current_txn_start_offset) == (3, 0), e
        wait_until(lambda: txn_state(c, f"{topic_name}-ok") == "CompleteCommit", 15, "the commit to complete")
        time.sleep(3 * ABORT_SCAN_MS / 1000)  # several abort scans: nothing times this out
        assert list_offset(c, topic_name, 0, READ_COMMITTED) == 0
        assert producer_entry(c, topic_name, ghost).current_txn_start_offset == 0
    assert values_of(drain(bs, topic_name)) == []


KILLED_PRODUCER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Producer
    bs, topic, txid, timeout_ms = sys.argv[1:5]
    p = Producer({"bootstrap.servers": bs, "transactional.id": txid, "transaction.timeout.ms": int(timeout_ms)})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"killed%d" % i, partition=0)
    assert p.flush(30) == 0
    print("READY", flush=True)
    time.sleep(600)
""")


@needs_tool
def test_killed_producer_open_transaction_is_not_hanging(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    timeout_ms = 3000
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PRODUCER, bs, topic_name, txid, str(timeout_ms)],
                            stdout=subprocess.PIPE, text=True)
    try:
        ready = threading.Event()
        threading.Thread(target=lambda: proc.stdout.readline() == "READY\n" and ready.set(), daemon=True).start()
        assert ready.wait(60), "the producer subprocess did not get its transaction going"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    with raw(bs) as c:
        d = describe_transaction(c, txid)
        assert d.transaction_state == "Ongoing", d
        pid, epoch = d.producer_id, d.producer_epoch
        if txn_state(c, txid) == "Ongoing":
            e = producer_entry(c, topic_name, pid)
            assert e is not None and e.current_txn_start_offset == 0, e
            # even counted as old enough (0 minutes), its coordinator knows it: not hanging
            assert cli(bs, "find-hanging", "--topic", topic_name, "--max-transaction-timeout", "0") == []
        wait_until(lambda: txn_state(c, txid) == "CompleteAbort", timeout_ms / 1000 + 15,
                   "the coordinator to abort the killed producer's transaction")
        assert describe_transaction(c, txid).producer_epoch == epoch + 1
        wait_until(lambda: list_offset(c, topic_name, 0, READ_COMMITTED) == list_offset(c, topic_name, 0,
                                                                                          READ_UNCOMMITTED),
                   15, "the LSO to be released")
        assert producer_entry(c, topic_name, pid).current_txn_start_offset == -1
    assert cli(bs, "find-hanging", "--topic", topic_name, "--max-transaction-timeout", "0") == []
    assert values_of(drain(bs, topic_name)) == []
