"""kbroker-transactions without a real broker: table format, arguments, errors, and the
protocol paths against a scripted fake broker (real sockets, real Kafka frames).

The fake answers ApiVersions and Metadata itself and hands every other request to a
handler of the test: ``fake.on(api_key, fn)`` with ``fn(version, request) -> dict`` (the
response in kio field names) or ``None`` (no answer, to test time-outs). Requests are
recorded as (api_key, version, request) in ``fake.seen``.
"""

from __future__ import annotations

import datetime
import io
import json
import socket
import struct
import threading
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from protocol.api import response_class
from protocol.codec import build, decode_request, encode_body, frame_response
from tools import kafka_client as kc
from tools import transactions as tx

NOW_MS = 1_800_000_000_000


# --------------------------------------------------------------------------- fake broker
class FakeBroker:
    def __init__(self, node_id: int = 1, versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.node_id = node_id
        self.versions = {3: (0, 12), 10: (0, 6), 27: (1, 1), 61: (0, 0), 65: (0, 0), 66: (0, 2)}
        self.versions.update(versions or {})
        self.handlers: dict[int, Callable] = {}
        self.seen: list[tuple[int, int, object]] = []
        self.peers: list[FakeBroker] = [self]
        self.topics: dict[str, list[dict]] = {}
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def on(self, api_key: int, fn: Callable) -> None:
        self.handlers[api_key] = fn

    def requests(self, api_key: int) -> list:
        return [req for key, _v, req in self.seen if key == api_key]

    def close(self) -> None:
        self.closed = True
        for c in self.conns:
            c.close()
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                frame = conn.recv(size, socket.MSG_WAITALL)
                header, req = decode_request(frame)
                key, version = header.api_key, header.api_version
                self.seen.append((key, version, req))
                body = self._answer(key, version, req)
                if body is None:
                    continue  # no answer: the client must time out
                conn.sendall(frame_response(key, version, header.correlation_id,
                                            encode_body(key, version, body)))
        except OSError:
            return

    def _answer(self, key: int, version: int, req) -> dict | None:
        if key == 18:
            return {"error_code": 0, "throttle_time": 0, "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.versions.items()]}
        if key == 3:
            names = list(self.topics) if req.topics is None else [t.name for t in req.topics]
            return {"throttle_time": 0, "cluster_id": "fake", "controller_id": 1,
                    "brokers": [{"node_id": b.node_id, "host": "127.0.0.1", "port": b.port, "rack": None}
                                for b in self.peers],
                    "topics": [{"error_code": 0, "name": n, "is_internal": n.startswith("__"),
                                "partitions": self.topics[n]} if n in self.topics else
                               {"error_code": ErrorCode.unknown_topic_or_partition, "name": n, "partitions": []}
                               for n in names]}
        return self.handlers[key](version, req)

    def add_topic(self, name: str, leaders: list[int], replicas: list[list[int]] | None = None) -> None:
        self.topics[name] = [{"error_code": 0, "partition_index": i, "leader_id": leader,
                              "replica_nodes": (replicas[i] if replicas else [leader]),
                              "isr_nodes": (replicas[i] if replicas else [leader])}
                             for i, leader in enumerate(leaders)]


@pytest.fixture
def fake():
    brokers: list[FakeBroker] = []

    def make(**kw) -> FakeBroker:
        b = FakeBroker(**kw)
        brokers.append(b)
        return b

    yield make
    for b in brokers:
        b.close()


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch):
    monkeypatch.setattr(tx.Admin, "now_ms", lambda self: NOW_MS)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = tx.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def table(out: str) -> list[list[str]]:
    """Rows of a Kafka-style table, cells stripped (each cell is followed by a tab)."""
    rows = []
    for line in out.splitlines():
        assert line.endswith("\t"), repr(line)
        rows.append([c.strip() for c in line[:-1].split("\t")])
    return rows


def producer(pid: int, epoch: int = 0, seq: int = 0, ts: int = NOW_MS, coord: int = -1, start: int = -1) -> dict:
    return {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq, "last_timestamp": ts,
            "coordinator_epoch": coord, "current_txn_start_offset": start}


def producers_response(by_partition: dict[tuple[str, int], list[dict] | int]) -> dict:
    topics: dict[str, list] = {}
    for (t, p), value in by_partition.items():
        entry = {"partition_index": p, "error_code": 0, "error_message": None, "active_producers": []}
        if isinstance(value, int):
            entry["error_code"] = value
        else:
            entry["active_producers"] = value
        topics.setdefault(t, []).append(entry)
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def coordinator(b: FakeBroker, error: int = 0) -> Callable:
    def answer(version, req):
        keys = req.coordinator_keys if version >= 4 else (req.key,)
        entries = [{"key": k, "node_id": b.node_id if not error else -1, "host": "127.0.0.1" if not error else "",
                    "port": b.port if not error else -1, "error_code": error, "error_message": None}
                   for k in keys]
        if version >= 4:
            return {"throttle_time": 0, "coordinators": entries}
        return {"throttle_time": 0, **entries[0]}
    return answer


def txn_state(tid: str, state: str = "Ongoing", pid: int = 7, epoch: int = 3, start: int = NOW_MS - 1500,
              topics: dict[str, list[int]] | None = None, error: int = 0) -> dict:
    return {"error_code": error, "transactional_id": tid, "transaction_state": state,
            "transaction_timeout": 60000, "transaction_start_time": start, "producer_id": pid,
            "producer_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in (topics or {}).items()]}


def describe_response(*states: dict) -> dict:
    return {"throttle_time": 0, "transaction_states": list(states)}


# --------------------------------------------------------------------------- formatting
def test_table_is_kafkas_pretty_print():
    out = tx.format_table(["ProducerId", "LastSequence"], [["12345678901", "0"], ["7", "12"]])
    assert out == ("ProducerId \tLastSequence\t\n"
                   "12345678901\t0           \t\n"
                   "7          \t12          \t\n")
    assert tx.format_table(["A", "B"], []) == "A\tB\t\n"


def test_cells_and_json_values():
    tps = [tx.TopicPartition("t", 0), tx.TopicPartition("t", 1)]
    assert tx.cell(None) == "None" and tx.cell(-1) == "-1" and tx.cell(tps) == "t-0,t-1" and tx.cell([]) == ""
    assert tx.json_value(tps) == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]


def test_error_names_and_descriptions():
    assert str(kc.ApiError(3)) == "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition."
    assert str(kc.ApiError(105, "gone")) == "TRANSACTIONAL_ID_NOT_FOUND: gone"
    assert kc.error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert kc.error_name(31000) == "UNKNOWN_ERROR_CODE_31000"
    assert kc.ApiError(15).retriable and not kc.ApiError(47).retriable


def test_negative_timestamps_are_read_as_ints():
    """kio's native reader refuses negative datetime_i64; Kafka sends -1 for "no transaction"."""
    cls = kc._raw_timestamps(response_class(65, 0))
    body = build(cls, describe_response(txn_state("x", "Empty", start=-1)))
    out = io.BytesIO()
    entity_writer(cls)(out, body)
    resp, _ = kc._response_reader(65, 0)(out.getvalue(), 0)
    assert resp.transaction_states[0].transaction_start_time == -1
    assert kc.to_ms(resp.transaction_states[0].transaction_timeout) == 60000
    # classes without timestamps are left alone
    assert kc._raw_timestamps(response_class(61, 0)) is response_class(61, 0)


def test_to_ms():
    assert kc.to_ms(datetime.timedelta(seconds=2)) == 2000
    assert kc.to_ms(datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)) == 1000
    assert kc.to_ms(None) == -1 and kc.to_ms(5) == 5


# --------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("argv, message", [
    (["abort", "--topic", "t", "--partition", "0"],
     "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or "
     "above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5"],
     "Missing required argument --producer-epoch"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch", "1"],
     "Missing required argument --coordinator-epoch"),
    (["find-hanging"],
     "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"),
    (["find-hanging", "--broker-id", "1", "--partition", "0"],
     "The --partition argument requires --topic to be provided"),
])
def test_validation_messages_are_kafkas(capsys, argv, message):
    # nothing listens on port 1: these fail before any connection
    rc, out, err = run(capsys, "--bootstrap-server", "127.0.0.1:1", *argv)
    assert (rc, out, err) == (1, "", message + "\n")


@pytest.mark.parametrize("argv", [
    ["list"],  # no --bootstrap-server
    ["--bootstrap-server", "h:1"],  # no command
    ["--bootstrap-server", "h:1", "describe"],  # no --transactional-id
    ["--bootstrap-server", "h:1", "describe-producers", "--topic", "t", "--partition", "x"],
    ["--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "0", "--producer-epoch", "40000"],
    ["--bootstrap-server", "h:1", "nope"],
])
def test_usage_errors_exit_1(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        tx.main(argv)
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("usage: kbroker-transactions") and "error:" in err


def test_bad_bootstrap_address(capsys):
    assert run(capsys, "--bootstrap-server", "localhost", "list") == (
        1, "", "invalid bootstrap server 'localhost': expected host:port\n")


def test_unreachable_broker(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        rc, out, err = run(capsys, "--bootstrap-server", f"127.0.0.1:{port}", "list")
    assert (rc, out) == (1, "")
    assert err == f"Failed to list transactions: cannot connect to 127.0.0.1:{port}: Connection refused\n"


def test_command_config(tmp_path, capsys, fake):
    b = fake()
    b.on(66, lambda v, r: {"throttle_time": 0, "error_code": 0, "transaction_states": []})
    cfg = tmp_path / "admin.properties"
    cfg.write_text("# comment\nclient.id = my-admin\nrequest.timeout.ms=5000\n")
    rc, out, _ = run(capsys, "--command-config", str(cfg), "--bootstrap-server", b.bootstrap, "list")
    assert rc == 0 and table(out) == [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
    cfg.write_text("security.protocol=SASL_SSL\n")
    assert run(capsys, "--command-config", str(cfg), "--bootstrap-server", b.bootstrap, "list") == (
        1, "", "security.protocol=SASL_SSL is not supported by this tool (PLAINTEXT only)\n")
    rc, _, err = run(capsys, "--command-config", str(tmp_path / "missing"), "--bootstrap-server", b.bootstrap, "list")
    assert rc == 1 and err.startswith("Failed to load admin client properties: No such file or directory")


# --------------------------------------------------------------------------- list
def test_list_asks_every_broker_and_labels_the_coordinator(capsys, fake):
    b1, b2 = fake(node_id=1), fake(node_id=2)
    b1.peers = b2.peers = [b2, b1]
    b1.on(66, lambda v, r: {"throttle_time": 0, "error_code": 0, "transaction_states": [
        {"transactional_id": "app-a", "producer_id": 10, "transaction_state": "Ongoing"},
        {"transactional_id": "app-b", "producer_id": 11, "transaction_state": "CompleteCommit"}]})
    calls = []

    def b2_list(v, r):  # loading at first: retried
        calls.append(v)
        if len(calls) == 1:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_load_in_progress,
                    "transaction_states": []}
        return {"throttle_time": 0, "error_code": 0, "transaction_states": [
            {"transactional_id": "a-much-longer-transactional-id", "producer_id": 2000,
             "transaction_state": "SomethingNew"}]}

    b2.on(66, b2_list)
    rc, out, err = run(capsys, "--bootstrap-server", b1.bootstrap, "list")
    assert (rc, err) == (0, "")
    assert out == ("TransactionalId               \tCoordinator\tProducerId\tTransactionState\t\n"
                   "app-a                         \t1          \t10        \tOngoing         \t\n"
                   "app-b                         \t1          \t11        \tCompleteCommit  \t\n"
                   "a-much-longer-transactional-id\t2          \t2000      \tUnknown         \t\n")
    assert calls == [2, 2]
    rc, out, _ = run(capsys, "--bootstrap-server", b1.bootstrap, "list", "--json")
    assert json.loads(out)[0] == {"transactional_id": "app-a", "coordinator": 1, "producer_id": 10,
                                  "transaction_state": "Ongoing"}


def test_list_filters_are_sent(capsys, fake):
    b = fake()
    b.on(66, lambda v, r: {"throttle_time": 0, "error_code": 0, "unknown_state_filters": ["Bogus"],
                           "transaction_states": []})
    rc, _, err = run(capsys, "--bootstrap-server", b.bootstrap, "list", "--duration-filter", "5000",
                     "--transactional-id-pattern", "app-.*", "--state", "Ongoing,Bogus", "--producer-id", "4",
                     "--producer-id", "9")
    assert rc == 0
    assert err == "warning: broker 1 does not know the transaction state(s) Bogus\n"
    (req,) = b.requests(66)
    assert (req.duration_filter, req.transactional_id_pattern) == (5000, "app-.*")
    assert list(req.state_filters) == ["Ongoing", "Bogus"] and list(req.producer_id_filters) == [4, 9]


def test_list_pattern_on_a_broker_without_v2_is_applied_here(capsys, fake):
    b = fake(versions={66: (0, 1)})
    b.on(66, lambda v, r: {"throttle_time": 0, "error_code": 0, "transaction_states": [
        {"transactional_id": "app-1", "producer_id": 1, "transaction_state": "Ongoing"},
        {"transactional_id": "xapp-2", "producer_id": 2, "transaction_state": "Ongoing"}]})
    rc, out, _ = run(capsys, "--bootstrap-server", b.bootstrap, "list", "--transactional-id-pattern", "app-.*")
    assert rc == 0 and [r[0] for r in table(out)[1:]] == ["app-1"]  # a full match, like Kafka's broker
    assert [v for k, v, _ in b.seen if k == 66] == [1]


def test_list_unsupported(capsys, fake):
    b = fake(versions={66: (0, 0)})
    rc, _, err = run(capsys, "--bootstrap-server", b.bootstrap, "list", "--duration-filter", "10")
    assert rc == 1 and err == ("Failed to list transactions: --duration-filter needs ListTransactions v1, "
                               "the broker speaks v0\n")
    del b.versions[66]
    b2 = fake()
    del b2.versions[66]
    rc, _, err = run(capsys, "--bootstrap-server", b2.bootstrap, "list")
    assert rc == 1 and err == (f"Failed to list transactions: broker 1 (127.0.0.1:{b2.port}) does not support "
                               f"ListTransactions (API key 66)\n")


# --------------------------------------------------------------------------- describe
@pytest.mark.parametrize("fc_version", [6, 3])
def test_describe(capsys, fake, fc_version):
    b = fake(versions={10: (0, fc_version)})
    attempts = []

    def find(version, req):
        attempts.append(version)
        return coordinator(b, ErrorCode.coordinator_not_available if len(attempts) == 1 else 0)(version, req)

    b.on(10, find)
    b.on(65, lambda v, r: describe_response(txn_state("app-a", topics={"t": [2, 0], "a": [1]})))
    rc, out, err = run(capsys, "--bootstrap-server", b.bootstrap, "describe", "--transactional-id", "app-a")
    assert (rc, err) == (0, "")
    assert table(out) == [
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
        ["1", "app-a", "7", "3", "Ongoing", "60000", str(NOW_MS - 1500), "1500", "a-1,t-0,t-2"]]
    assert attempts == [fc_version, fc_version]
    finds = b.requests(10)
    assert all(r.key_type == 1 for r in finds)
    assert (list(finds[0].coordinator_keys) if fc_version >= 4 else finds[0].key) == (
        ["app-a"] if fc_version >= 4 else "app-a")
    assert list(b.requests(65)[0].transactional_ids) == ["app-a"]


def test_describe_without_a_transaction_and_json(capsys, fake):
    b = fake()
    b.on(10, coordinator(b))
    b.on(65, lambda v, r: describe_response(txn_state("app-a", "Empty", start=-1)))
    rc, out, _ = run(capsys, "--bootstrap-server", b.bootstrap, "describe", "--transactional-id", "app-a")
    assert table(out)[1] == ["1", "app-a", "7", "3", "Empty", "60000", "None", "None", ""]
    rc, out, _ = run(capsys, "--bootstrap-server", b.bootstrap, "--json", "describe", "--transactional-id", "app-a")
    assert json.loads(out) == {"coordinator_id": 1, "transactional_id": "app-a", "producer_id": 7,
                               "producer_epoch": 3, "transaction_state": "Empty",
                               "transaction_timeout_ms": 60000, "current_transaction_start_time_ms": None,
                               "transaction_duration_ms": None, "topic_partitions": []}


def test_describe_errors(capsys, fake):
    b = fake()
    b.on(10, coordinator(b))
    b.on(65, lambda v, r: describe_response(txn_state("nope", "", error=ErrorCode.transactional_id_not_found)))
    assert run(capsys, "--bootstrap-server", b.bootstrap, "describe", "--transactional-id", "nope") == (
        1, "", "Failed to describe transaction state of transactional-id `nope`: "
               "TRANSACTIONAL_ID_NOT_FOUND: The transactionalId could not be found.\n")
    b.on(10, coordinator(b, ErrorCode.coordinator_not_available))
    rc, out, err = run(capsys, "--bootstrap-server", b.bootstrap, "--timeout-ms", "300", "describe",
                       "--transactional-id", "nope")
    assert (rc, out) == (1, "")
    assert err.startswith("Failed to describe transaction state of transactional-id `nope`: "
                          "COORDINATOR_NOT_AVAILABLE")


def test_request_timeout(tmp_path, capsys, fake):
    b = fake()
    b.on(10, lambda v, r: None)  # never answers
    cfg = tmp_path / "c.properties"
    cfg.write_text("request.timeout.ms=300\n")
    rc, out, err = run(capsys, "--command-config", str(cfg), "--bootstrap-server", b.bootstrap, "describe",
                       "--transactional-id", "x")
    assert (rc, out) == (1, "")
    assert err == (f"Failed to describe transaction state of transactional-id `x`: 127.0.0.1:{b.port} "
                   f"did not answer FindCoordinator within 0.3s\n")


# --------------------------------------------------------------------------- describe-producers
def test_describe_producers(capsys, fake):
    b1, b2 = fake(node_id=1), fake(node_id=2)
    b1.peers = b2.peers = [b1, b2]
    b1.add_topic("t", leaders=[1, 2], replicas=[[1, 2], [2, 1]])
    b2.on(61, lambda v, r: producers_response({("t", 1): [
        producer(1000, epoch=2, seq=41, ts=NOW_MS - 5, coord=4, start=17), producer(1001, seq=9)]}))
    rc, out, err = run(capsys, "--bootstrap-server", b1.bootstrap, "describe-producers", "--topic", "t",
                       "--partition", "1")
    assert (rc, err) == (0, "")
    assert out == (
        "ProducerId\tProducerEpoch\tLatestCoordinatorEpoch\tLastSequence\tLastTimestamp\tCurrentTransactionStartOffset\t\n"
        f"1000      \t2            \t4                     \t41          \t{NOW_MS - 5}\t17                           \t\n"
        f"1001      \t0            \t-1                    \t9           \t{NOW_MS}\tNone                         \t\n")
    (req,) = b2.requests(61)  # to the leader, broker 2
    assert [(t.name, list(t.partition_indexes)) for t in req.topics] == [("t", [1])]
    rc, out, _ = run(capsys, "--bootstrap-server", b1.bootstrap, "describe-producers", "--topic", "t",
                     "--partition", "1", "--json")
    assert json.loads(out)[1] == {"producer_id": 1001, "producer_epoch": 0, "latest_coordinator_epoch": -1,
                                  "last_sequence": 9, "last_timestamp": NOW_MS,
                                  "current_transaction_start_offset": None}


def test_describe_producers_on_a_chosen_broker(capsys, fake):
    b1, b2 = fake(node_id=1), fake(node_id=2)
    b1.peers = b2.peers = [b1, b2]
    b1.add_topic("t", leaders=[2], replicas=[[2, 1]])
    b1.on(61, lambda v, r: producers_response({("t", 0): [producer(5)]}))
    rc, out, _ = run(capsys, "--bootstrap-server", b2.bootstrap, "describe-producers", "--topic", "t",
                     "--partition", "0", "--broker-id", "1")
    assert rc == 0 and table(out)[1][0] == "5" and not b2.requests(61)
    b1.on(61, lambda v, r: producers_response({("t", 0): ErrorCode.not_leader_or_follower}))
    assert run(capsys, "--bootstrap-server", b2.bootstrap, "describe-producers", "--topic", "t",
               "--partition", "0", "--broker-id", "1") == (
        1, "", "Failed to describe producers for partition t-0 on broker 1: NOT_LEADER_OR_FOLLOWER: "
               "broker 1 is not a replica of t-0\n")
    assert run(capsys, "--bootstrap-server", b2.bootstrap, "describe-producers", "--topic", "t",
               "--partition", "0", "--broker-id", "3") == (
        1, "", "Failed to describe producers for partition t-0 on broker 3: broker 3 is not in the cluster "
               "metadata (brokers: 1, 2)\n")


def test_describe_producers_unknown_topic_or_partition(capsys, fake):
    b = fake()
    b.add_topic("t", leaders=[1, 1])
    assert run(capsys, "--bootstrap-server", b.bootstrap, "describe-producers", "--topic", "nope",
               "--partition", "0") == (
        1, "", "Failed to describe producers for partition nope-0 on leader: UNKNOWN_TOPIC_OR_PARTITION: "
               "topic nope does not exist\n")
    assert run(capsys, "--bootstrap-server", b.bootstrap, "describe-producers", "--topic", "t",
               "--partition", "5") == (
        1, "", "Failed to describe producers for partition t-5 on leader: UNKNOWN_TOPIC_OR_PARTITION: "
               "topic t has no partition 5 (it has 2 partitions)\n")


def test_describe_producers_follows_a_moved_leader(capsys, fake):
    b = fake()
    b.add_topic("t", leaders=[1])
    answers = iter([producers_response({("t", 0): ErrorCode.not_leader_or_follower}),
                    producers_response({("t", 0): [producer(3)]})])
    b.on(61, lambda v, r: next(answers))
    rc, out, _ = run(capsys, "--bootstrap-server", b.bootstrap, "describe-producers", "--topic", "t",
                     "--partition", "0")
    assert rc == 0 and table(out)[1][0] == "3" and len(b.requests(61)) == 2


# --------------------------------------------------------------------------- abort
def test_abort_by_start_offset(capsys, fake):
    b = fake()
    b.add_topic("t", leaders=[1, 1])
    b.on(61, lambda v, r: producers_response({("t", 1): [producer(40, epoch=1, start=3, coord=-1),
                                                         producer(41, epoch=5, start=12, coord=7)]}))
    b.on(27, lambda v, r: {"markers": [{"producer_id": m.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p, "error_code": 0} for p in t.partition_indexes]}
        for t in m.topics]} for m in r.markers]})
    assert run(capsys, "--bootstrap-server", b.bootstrap, "abort", "--topic", "t", "--partition", "1",
               "--start-offset", "12") == (0, "", "")
    assert run(capsys, "--bootstrap-server", b.bootstrap, "abort", "--topic", "t", "--partition", "1",
               "--start-offset", "3", "--json")[0] == 0
    m1, m2 = (r.markers[0] for r in b.requests(27))
    assert (m1.producer_id, m1.producer_epoch, m1.coordinator_epoch, m1.transaction_result) == (41, 5, 7, False)
    assert (m2.producer_id, m2.producer_epoch, m2.coordinator_epoch) == (40, 1, 0)  # -1 -> 0, like Kafka
    assert [(t.name, list(t.partition_indexes)) for t in m1.topics] == [("t", [1])]
    assert run(capsys, "--bootstrap-server", b.bootstrap, "abort", "--topic", "t", "--partition", "1",
               "--start-offset", "4") == (
        1, "", "Could not find any open transactions starting at offset 4 on partition t-1\n")


def test_abort_explicit_producer_and_errors(capsys, fake):
    b = fake()
    b.add_topic("t", leaders=[1])
    code = {"value": ErrorCode.invalid_producer_epoch}
    b.on(27, lambda v, r: {"markers": [{"producer_id": r.markers[0].producer_id, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": code["value"]}]}]}]})
    rc, out, err = run(capsys, "--bootstrap-server", b.bootstrap, "abort", "--topic", "t", "--partition", "0",
                       "--producer-id", "9", "--producer-epoch", "2", "--coordinator-epoch", "-1")
    assert (rc, out) == (1, "")
    assert err == ("Failed to abort transaction AbortTransactionSpec(topicPartition=t-0, producerId=9, "
                   "producerEpoch=2, coordinatorEpoch=0): INVALID_PRODUCER_EPOCH: Producer attempted to "
                   "produce with an old epoch.\n")
    code["value"] = 0
    rc, out, _ = run(capsys, "--bootstrap-server", b.bootstrap, "--json", "abort", "--topic", "t", "--partition",
                     "0", "--producer-id", "9", "--producer-epoch", "2", "--coordinator-epoch", "4")
    assert rc == 0 and json.loads(out) == {"topic": "t", "partition": 0, "producer_id": 9, "producer_epoch": 2,
                                           "coordinator_epoch": 4, "aborted": True}


# --------------------------------------------------------------------------- find-hanging
MINUTE = 60_000


@pytest.fixture
def hanging_cluster(fake):
    """t-0: pid 1 (no transactional id) open 30 min -> hanging; pid 2 (app-2, Ongoing with t-0)
    -> not hanging; pid 3 open 1 min -> too recent; pid 4 idle (no open transaction).
    t-1: pid 2 (app-2 does not include t-1) -> hanging; pid 5 (app-5 not found) -> hanging.
    u-0 (on broker 2 only): pid 6 -> hanging."""
    b1, b2 = fake(node_id=1), fake(node_id=2)
    b1.peers = b2.peers = [b1, b2]
    b1.add_topic("t", leaders=[1, 1], replicas=[[1], [1]])
    b1.add_topic("u", leaders=[2], replicas=[[2]])
    b1.add_topic("__transaction_state", leaders=[1], replicas=[[1]])
    old = NOW_MS - 30 * MINUTE
    b1.on(61, lambda v, r: producers_response({(t.name, p): {
        ("t", 0): [producer(1, ts=old, start=10), producer(2, ts=old, start=11, coord=3),
                   producer(3, ts=NOW_MS - MINUTE, start=12), producer(4, ts=old)],
        ("t", 1): [producer(2, ts=old, start=0, coord=3), producer(5, epoch=2, ts=old, start=4)],
        ("__transaction_state", 0): []}[(t.name, p)] for t in r.topics for p in t.partition_indexes}))
    b2.on(61, lambda v, r: producers_response({("u", 0): [producer(6, ts=old, start=1)]}))
    listing = {2: "app-2", 5: "app-5"}
    for b in (b1, b2):
        b.on(66, lambda v, r, b=b: {"throttle_time": 0, "error_code": 0, "transaction_states": [
            {"transactional_id": listing[pid], "producer_id": pid, "transaction_state": "Ongoing"}
            for pid in r.producer_id_filters if pid in listing and b.node_id == 1]})
    b1.on(10, coordinator(b1))
    b1.on(65, lambda v, r: describe_response(*[
        txn_state("app-2", pid=2, topics={"t": [0]}) if tid == "app-2" else
        txn_state(tid, "", error=ErrorCode.transactional_id_not_found) for tid in r.transactional_ids]))
    return b1, b2


def test_find_hanging_by_topic(capsys, hanging_cluster):
    b1, b2 = hanging_cluster
    rc, out, err = run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--topic", "t")
    assert (rc, err) == (0, "")
    old = str(NOW_MS - 30 * MINUTE)
    assert table(out) == [
        ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
         "Duration(min)"],
        ["t", "0", "1", "0", "-1", "10", old, "30"],
        ["t", "1", "2", "0", "3", "0", old, "30"],
        ["t", "1", "5", "2", "-1", "4", old, "30"]]
    # ListTransactions went to every broker, filtered by the candidates' producer ids
    assert [sorted(r.producer_id_filters) for r in b1.requests(66) + b2.requests(66)] == [[1, 2, 5], [1, 2, 5]]
    assert sorted(b1.requests(65)[0].transactional_ids) == ["app-2", "app-5"]
    # a longer max timeout leaves none; a shorter one adds pid 3 (no transactional id)
    rc, out, _ = run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--topic", "t",
                     "--max-transaction-timeout", "31")
    assert table(out)[1:] == []
    rc, out, _ = run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--topic", "t", "--partition", "0",
                     "--max-transaction-timeout", "0", "--json")
    assert [(h["producer_id"], h["duration_min"]) for h in json.loads(out)] == [(1, 30), (3, 1)]


def test_find_hanging_by_broker(capsys, hanging_cluster):
    b1, b2 = hanging_cluster
    rc, out, _ = run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--broker-id", "2")
    assert rc == 0 and [r[:3] for r in table(out)[1:]] == [["u", "0", "6"]]
    (req,) = b2.requests(61)
    assert [(t.name, list(t.partition_indexes)) for t in req.topics] == [("u", [0])]
    rc, out, _ = run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--broker-id", "1")
    # internal topics are not searched (Kafka's listTopics() leaves them out)
    assert [r[:3] for r in table(out)[1:]] == [["t", "0", "1"], ["t", "1", "2"], ["t", "1", "5"]]
    assert all(t.name != "__transaction_state" for r in b1.requests(61) for t in r.topics)


def test_find_hanging_errors(capsys, hanging_cluster):
    b1, _ = hanging_cluster
    assert run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--topic", "nope") == (
        1, "", "Failed to describe 1 topics: UNKNOWN_TOPIC_OR_PARTITION: topic nope does not exist\n")
    b1.on(65, lambda v, r: describe_response(*[txn_state(t, "", error=ErrorCode.transactional_id_authorization_failed)
                                               for t in r.transactional_ids]))
    rc, _, err = run(capsys, "--bootstrap-server", b1.bootstrap, "find-hanging", "--topic", "t")
    assert rc == 1 and err.startswith("Failed to describe 2 transactions: TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
