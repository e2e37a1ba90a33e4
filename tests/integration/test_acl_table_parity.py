"""The ACL table of the exactly-once APIs, row by row, against our broker and Apache Kafka.

Each row names the ACLs an API needs (Kafka's KafkaApis and its security documentation). For
each of them a SASL/PLAIN user holding every other one (and what the call's setup needs) gets
exactly the error code listed, and a user holding all of them gets through. Every case has its
own user and its own topic, transactional id and group, so grants never leak between cases.

Target: ``KBROKER_EOS_TARGET=kafka`` runs the same rows against a real Apache Kafka 4.3.1 with the
same listeners, authorizer and users (the parity check); otherwise our broker.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from protocol.errors import ErrorCode
from tests.integration.test_acls import create_acls
from tests.support.eos_accept import IS_KAFKA, RETRIABLE_COORDINATOR, batch, call, create_topic
from tests.support.raw import RawClient, describe_transaction
from tools.devcluster import free_port

USERS = 60
PASSWORD = "pw"
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_u{i}="{PASSWORD}"' for i in range(USERS)) + ";")


SECURITY = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
    "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener (setup) and Kafka's controller
}


@dataclass
class Target:
    plain: str  # PLAINTEXT: User:ANONYMOUS, a super user
    sasl: str   # SASL_PLAINTEXT: the users under test

    def __post_init__(self) -> None:
        self._users = itertools.count()
        self._names = itertools.count()

    def login(self, user: str) -> RawClient:
        c = RawClient(self.sasl)
        assert call(c, 17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        token = b"\x00" + user.encode() + b"\x00" + PASSWORD.encode()
        assert call(c, 36, 2, {"auth_bytes": token}).error_code == ErrorCode.none
        return c

    def new_user(self) -> str:
        n = next(self._users)
        assert n < USERS, "more cases than users: raise USERS"
        return f"u{n}"

    def new_names(self) -> Names:
        n = next(self._names)
        names = Names(f"acl-t{n}-{time.time_ns() % 10**9}", f"acl-x{n}", f"acl-g{n}")
        create_topic(self.plain, names.topic)
        return names


@dataclass(frozen=True)
class Names:
    topic: str
    txid: str
    group: str


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    sasl_port = free_port()
    if IS_KAFKA:
        from compat.kafka.kraft import KafkaBroker

        port, cport = free_port(), free_port()
        kb = KafkaBroker(port=port, controller_port=cport, heap_opts="-Xmx768m -Xms256m", extra_config={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},"
                         f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            **SECURITY}).start()
        yield _primed(Target(kb.bootstrap, f"127.0.0.1:{sasl_port}"))
        kb.stop()
        return
    from tests.support.broker_process import BrokerProcess

    b = BrokerProcess(str(tmp_path_factory.mktemp("acl-parity") / "data"))
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        **SECURITY})
    b.start()
    yield _primed(Target(b.bootstrap, f"127.0.0.1:{sasl_port}"))
    b.kill9()


def _primed(t: Target) -> Target:
    """Both internal topics exist before the first case (their creation is not under test)."""
    with RawClient(t.plain) as c:
        for key_type in (0, 1):
            _retrying(lambda kt=key_type: call(c, 10, 3, {"key": "prime", "key_type": kt}).error_code)
    return t


def _retrying(attempt: Callable[[], int], timeout: float = 30.0) -> int:
    """An error code, retried while the coordinator is not ready."""
    deadline = time.monotonic() + timeout
    while True:
        code = attempt()
        if code not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
            return code
        time.sleep(0.2)


# --- the calls ----------------------------------------------------------------------------------

def _init(c: RawClient, txid: str | None) -> tuple[int, int, int]:
    """InitProducerId: (error, producer id, epoch)."""
    box = {}

    def attempt() -> int:
        r = call(c, 22, 4, {"transactional_id": txid, "transaction_timeout": 60000,
                            "producer_id": -1, "producer_epoch": -1})
        box["r"] = r
        return r.error_code
    code = _retrying(attempt)
    r = box["r"]
    return code, r.producer_id, r.producer_epoch


def _producer(c: RawClient, n: Names) -> tuple[int, int]:
    """The case's transactional producer, where the user may initialize one (else a made-up id:
    the call under test is refused before the producer is looked at)."""
    code, pid, epoch = _init(c, n.txid)
    return (pid, epoch) if code == ErrorCode.none else (4242, 0)


def _add_partitions(c: RawClient, n: Names, pid: int, epoch: int) -> int:
    return _retrying(lambda: call(c, 24, 3, {
        "v3_and_below_transactional_id": n.txid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": n.topic, "partitions": [0]}]}
    ).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def _add_offsets(c: RawClient, n: Names, pid: int, epoch: int) -> int:
    return _retrying(lambda: call(c, 25, 3, {"transactional_id": n.txid, "producer_id": pid,
                                             "producer_epoch": epoch, "group_id": n.group}).error_code)


def _produce(c: RawClient, n: Names, pid: int, epoch: int) -> int:
    records = batch([b"v"], pid, epoch, 0, transactional=True)
    r = call(c, 0, 9, {"transactional_id": n.txid, "acks": -1, "timeout": 10000, "topic_data": [
        {"name": n.topic, "partition_data": [{"index": 0, "records": records}]}]})
    return r.responses[0].partition_responses[0].error_code


def produce_transactional(c, n):
    pid, epoch = _producer(c, n)
    _add_partitions(c, n, pid, epoch)
    return _produce(c, n, pid, epoch)


def init_transactional(c, n):
    return _init(c, n.txid)[0]


def init_idempotent(c, n):
    return _init(c, None)[0]


def find_group_coordinator(c, n):
    return _retrying(lambda: call(c, 10, 3, {"key": n.group, "key_type": 0}).error_code)


def find_transaction_coordinator(c, n):
    return _retrying(lambda: call(c, 10, 3, {"key": n.txid, "key_type": 1}).error_code)


def add_partitions_to_txn(c, n):
    pid, epoch = _producer(c, n)
    return _add_partitions(c, n, pid, epoch)


def add_offsets_to_txn(c, n):
    pid, epoch = _producer(c, n)
    return _add_offsets(c, n, pid, epoch)


def end_txn(c, n):
    pid, epoch = _producer(c, n)
    _add_partitions(c, n, pid, epoch)
    _produce(c, n, pid, epoch)
    return _retrying(lambda: call(c, 26, 3, {"transactional_id": n.txid, "producer_id": pid,
                                             "producer_epoch": epoch, "committed": True}).error_code)


def txn_offset_commit(c, n):
    pid, epoch = _producer(c, n)
    _add_offsets(c, n, pid, epoch)
    return _retrying(lambda: call(c, 28, 3, {
        "transactional_id": n.txid, "group_id": n.group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}],
    }).topics[0].partitions[0].error_code)


def write_txn_markers(c, n):
    r = call(c, 27, 1, {"markers": [{"producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
                                     "topics": [{"name": n.topic, "partition_indexes": [0]}],
                                     "coordinator_epoch": 0}]})
    return r.markers[0].topics[0].partitions[0].error_code


def describe_producers(c, n):
    r = call(c, 61, 0, {"topics": [{"name": n.topic, "partition_indexes": [0]}]})
    return r.topics[0].partitions[0].error_code


def describe_transactions(c, n):
    return describe_transaction(c, n.txid).error_code


NOT_LISTED = -1  # ListTransactions filters what the caller may not describe: no error code


def list_transactions(c, n):
    r = call(c, 66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    assert r.error_code == ErrorCode.none
    return ErrorCode.none if n.txid in {t.transactional_id for t in r.transaction_states} else NOT_LISTED


# --- the table ----------------------------------------------------------------------------------

TOPIC, TXID, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP, ResourceType.BROKER
Grant = tuple[ResourceType, AclOperation]
E = ErrorCode


@dataclass(frozen=True)
class Row:
    api: Callable[[RawClient, Names], int]
    needs: dict[Grant, int]  # each ACL the API checks -> the code when only it is missing
    setup: tuple[Grant, ...] = ()  # what the call's setup needs besides
    existing_txn: bool = False  # the transactional id is initialized (by a super user) first

    def __str__(self) -> str:
        return self.api.__name__


ROWS = [
    Row(produce_transactional, {(TXID, AclOperation.WRITE): E.transactional_id_authorization_failed,
                                (TOPIC, AclOperation.WRITE): E.topic_authorization_failed}),
    Row(init_transactional, {(TXID, AclOperation.WRITE): E.transactional_id_authorization_failed}),
    Row(find_group_coordinator, {(GROUP, AclOperation.DESCRIBE): E.group_authorization_failed}),
    Row(find_transaction_coordinator, {(TXID, AclOperation.DESCRIBE): E.transactional_id_authorization_failed}),
    Row(add_partitions_to_txn, {(TXID, AclOperation.WRITE): E.transactional_id_authorization_failed,
                                (TOPIC, AclOperation.WRITE): E.topic_authorization_failed}),
    Row(add_offsets_to_txn, {(TXID, AclOperation.WRITE): E.transactional_id_authorization_failed,
                             (GROUP, AclOperation.READ): E.group_authorization_failed}),
    Row(end_txn, {(TXID, AclOperation.WRITE): E.transactional_id_authorization_failed},
        setup=((TOPIC, AclOperation.WRITE),)),
    Row(txn_offset_commit, {(GROUP, AclOperation.READ): E.group_authorization_failed,
                            (TOPIC, AclOperation.READ): E.topic_authorization_failed},
        setup=((TXID, AclOperation.WRITE),)),
    Row(write_txn_markers, {(CLUSTER, AclOperation.CLUSTER_ACTION): E.cluster_authorization_failed}),
    Row(describe_producers, {(TOPIC, AclOperation.READ): E.topic_authorization_failed}),
    Row(describe_transactions, {(TXID, AclOperation.DESCRIBE): E.transactional_id_authorization_failed},
        existing_txn=True),
    Row(list_transactions, {(TXID, AclOperation.DESCRIBE): NOT_LISTED}, existing_txn=True),
]


def _binding(user: str, grant: Grant, n: Names) -> AclBinding:
    kind, operation = grant
    name = {TOPIC: n.topic, TXID: n.txid, GROUP: n.group, CLUSTER: "kafka-cluster"}[kind]
    return AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", operation,
                      AclPermissionType.ALLOW)


def _case(target: Target, row: Row, grants: list[Grant], expected: int) -> int:
    """The code ``row``'s call gets from a user holding ``grants``. Kafka applies new ACLs a
    moment after CreateAcls answers, so the call is repeated (boundedly) until it gives the
    expected code or the wait is over."""
    user, n = target.new_user(), target.new_names()
    if row.existing_txn:
        with RawClient(target.plain) as c:
            assert _init(c, n.txid)[0] == ErrorCode.none
    if grants:
        create_acls(target.plain, *[_binding(user, g, n) for g in grants])
    deadline = time.monotonic() + 5
    with target.login(user) as c:
        while True:
            code = row.api(c, n)
            if code == expected or time.monotonic() > deadline:
                return code
            time.sleep(0.2)


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_each_missing_acl_gets_kafkas_code_and_all_of_them_get_through(target, row):
    for missing, code in row.needs.items():
        others = [g for g in row.needs if g != missing] + list(row.setup)
        assert _case(target, row, others, code) == code, f"{row} without {missing}"
    assert _case(target, row, list(row.needs) + list(row.setup), ErrorCode.none) == ErrorCode.none, row


def test_an_idempotent_producer_id_needs_idempotent_write_or_write_on_some_topic(target):
    row = Row(init_idempotent, {})
    assert _case(target, row, [], E.cluster_authorization_failed) == E.cluster_authorization_failed
    assert _case(target, row, [(CLUSTER, AclOperation.IDEMPOTENT_WRITE)], E.none) == E.none
    assert _case(target, row, [(TOPIC, AclOperation.WRITE)], E.none) == E.none


def test_a_v0_handshake_takes_bare_token_frames(target):
    """Pre-1.0 framing: after SaslHandshake v0 the token is a bare frame each way; a wrong
    password gets no answer at all, only the close."""
    metadata = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    user = target.new_user()
    for password, answered in ((PASSWORD, True), ("wrong", False)):
        with RawClient(target.sasl) as c:
            assert call(c, 17, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
            c.send_frame(b"\x00" + user.encode() + b"\x00" + password.encode())
            if answered:
                assert c.recv_frame() == b""
                assert call(c, 3, 12, metadata).brokers
            else:
                assert c.recv_frame() is None
