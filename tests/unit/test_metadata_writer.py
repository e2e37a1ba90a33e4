"""The metadata writer's handling of a write whose answer was lost, against an in-memory etcd:
the keys it wrote are read back, and it is sent again only if they do not hold it, with its
compare intact (or, for a write that compared nothing, a compare on what was just read), so it
is applied once and never over a change made since. Also the store client's reading of
endpoints and of errors."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import grpc
import pytest
from aetcd import exceptions as etcd_errors
from aetcd import rpc
from aetcd import transactions as tx

from metadata.etcd.client import (
    TRANSACTIONS,
    StoreUnavailable,
    WriteOutcomeUnknown,
    member_failed,
    not_sent,
    parse_endpoints,
)
from metadata.etcd.keys import KeySpace
from metadata.etcd.writer import MetadataWriter
from metadata.records import PartitionState
from security.acls import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAcl


class MemoryEtcd:
    """A key-value store with etcd's revisions and transaction compares. ``faults``: what the
    next write transactions do with their answer: "lost" (applied, answer lost), "unsent" (not
    applied, answer lost) or "late" (answer lost; applied after the writer's read-back, just
    before its next write, as a request a paused member still had queued)."""

    transactions = TRANSACTIONS

    def __init__(self) -> None:
        self.kv: dict[bytes, SimpleNamespace] = {}
        self.revision = 1
        self.faults: list[str] = []
        self.sent: list[list] = []  # the success operations of every write transaction sent
        self._late = None

    def _matches(self, c) -> bool:
        kv = self.kv.get(c.key)
        field = {tx.Version: "version", tx.Mod: "mod_revision", tx.Create: "create_revision"}[type(c)]
        have = getattr(kv, field) if kv is not None else 0
        return {rpc.Compare.EQUAL: have == c.value, rpc.Compare.GREATER: have > c.value}[c.op]

    def _apply(self, compare, success) -> tuple[bool, list, int]:
        if not all(self._matches(c) for c in compare):
            return False, [], self.revision
        writes = [op for op in success if not isinstance(op, tx.Get)]
        if writes:
            self.revision += 1
        responses = []
        for op in success:
            if isinstance(op, tx.Put):
                old = self.kv.get(op.key)
                self.kv[op.key] = SimpleNamespace(key=op.key, value=op.value, mod_revision=self.revision,
                                                  create_revision=old.create_revision if old else self.revision,
                                                  version=(old.version if old else 0) + 1, lease=op.lease or 0)
                responses.append(None)
            elif isinstance(op, tx.Delete):
                end = op.range_end
                for k in [k for k in self.kv if k == op.key or (end and op.key <= k < end)]:
                    del self.kv[k]
                responses.append(None)
            else:
                kv = self.kv.get(op.key)
                responses.append(SimpleNamespace(response_range=SimpleNamespace(kvs=[kv] if kv else [])))
        return True, responses, self.revision

    async def transaction(self, compare, success, failure=None, timeout=None, write=True):
        if not write:
            return self._apply([], success)
        if self._late is not None:
            late, self._late = self._late, None
            self._apply(*late)
        self.sent.append(list(success))
        fault = self.faults.pop(0) if self.faults else None
        if fault == "lost":
            self._apply(compare, success)
            raise WriteOutcomeUnknown("answer lost")
        if fault == "unsent":
            raise WriteOutcomeUnknown("answer lost")
        if fault == "late":
            self._late = (compare, success)
            raise WriteOutcomeUnknown("answer lost")
        return self._apply(compare, success)

    async def get(self, key, timeout=None):
        return self.kv.get(key)


def writer_over(etcd: MemoryEtcd) -> MetadataWriter:
    async def applied(_revision):
        return None
    return MetadataWriter(etcd, KeySpace("/t"), node_id=1, wait_applied=applied, active_brokers=lambda: {1, 2, 3})


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("fault", ["lost", "unsent", "late"])
def test_a_topic_whose_create_answer_was_lost_is_created_once(fault):
    """Applied: read back, not sent again. Not applied: sent again with its compare. Landing
    late (after the read-back): the second try's compare fails, and a second read-back finds
    the writer's own topic id, which is success, not "already exists"."""
    etcd = MemoryEtcd()
    writer = writer_over(etcd)
    etcd.faults = [fault]
    run(writer.create_topic("t", [[1, 2, 3], [2, 3, 1]], {}))
    record = json.loads(etcd.kv[b"/t/topics/t"].value)
    assert record["partitions"] == 2 and etcd.kv[b"/t/topics/t"].version == 1
    assert writer.unknown_outcomes == 1
    assert len(etcd.sent) == (1 if fault == "lost" else 2), "sent again only when it had not been applied"
    # Creating it again is refused: the topic exists, whoever created it.
    from protocol.errors import KafkaError
    with pytest.raises(KafkaError, match="already exists"):
        run(writer.create_topic("t", [[1]], {}))


def test_a_partition_change_lost_after_it_applied_is_not_sent_again_and_a_stale_one_is_refused():
    etcd = MemoryEtcd()
    writer = writer_over(etcd)
    run(writer.create_topic("t", [[1, 2]], {}))
    kv = etcd.kv[b"/t/partitions/t/0"]
    state = PartitionState.from_json(json.loads(kv.value), kv.mod_revision)
    new = PartitionState(2, state.leader_epoch + 1, state.replicas, [2], state.partition_epoch + 1)
    etcd.faults = ["lost"]
    sent = len(etcd.sent)
    assert run(writer.alter_partitions([("t", 0, new, kv.mod_revision)])) == {("t", 0)}
    assert len(etcd.sent) == sent + 1
    # The same decision on the old revision again: refused, not applied twice.
    assert run(writer.alter_partitions([("t", 0, new, kv.mod_revision)])) == set()
    assert json.loads(etcd.kv[b"/t/partitions/t/0"].value)["leader"] == 2


def test_a_write_without_compare_is_sent_again_only_over_what_was_read():
    """ACLs compare nothing. Lost before it applied: sent again with a compare on the revision
    just read. Had another broker changed the key meanwhile, that change is kept."""
    etcd = MemoryEtcd()
    writer = writer_over(etcd)
    acl = StandardAcl(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*", AclOperation.READ,
                      AclPermissionType.ALLOW)
    etcd.faults = ["unsent"]
    run(writer.create_acls([acl]))
    key = f"/t/acls/{acl.acl_id}".encode()
    assert etcd.kv[key].version == 1 and len(etcd.sent) == 2

    etcd2 = MemoryEtcd()
    writer2 = writer_over(etcd2)
    quota_key = b"/t/quotas/e"
    real = etcd2.transaction

    async def someone_else_writes_first(compare, success, failure=None, timeout=None, write=True):
        if write and len(etcd2.sent) == 1:  # between the lost try and the second one
            etcd2._apply([], [tx.Put(quota_key, b'{"producer_byte_rate":1.0}')])
        return await real(compare, success, failure, timeout, write)
    etcd2.transaction = someone_else_writes_first
    etcd2.faults = ["unsent"]
    run(writer2.alter_client_quotas({"e": {"producer_byte_rate": 2.0}}))
    assert json.loads(etcd2.kv[quota_key].value) == {"producer_byte_rate": 1.0}, "a newer change was overwritten"


def test_a_producer_id_block_whose_answer_was_lost_is_known_by_its_owner():
    etcd = MemoryEtcd()
    writer = writer_over(etcd)
    etcd.faults = ["lost"]
    first = run(writer.allocate_producer_id_block())
    second = run(writer.allocate_producer_id_block())
    assert first == (0, 1000) and second == (1000, 1000), "a block taken once, and handed out once"


def test_endpoints_and_errors_are_read_as_etcd_means_them():
    assert parse_endpoints("h1:2379, http://h2:2380,https://[::1]:2379") == [("h1", 2379), ("h2", 2380), ("::1", 2379)]
    for bad in ("", "h1", "h1:x"):
        with pytest.raises(ValueError):
            parse_endpoints(bad)

    class Rpc(grpc.aio.AioRpcError):
        def __init__(self, code, details):
            super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)

    no_leader = etcd_errors.ConnectionFailedError("etcdserver: no leader")
    no_leader.__cause__ = Rpc(grpc.StatusCode.UNAVAILABLE, "etcdserver: no leader")
    timed_out = etcd_errors.ConnectionFailedError("etcdserver: request timed out")
    assert member_failed(no_leader) and not_sent(no_leader)
    assert member_failed(timed_out) and not not_sent(timed_out), "a timed-out write may have been applied"
    assert member_failed(TimeoutError()) and not not_sent(TimeoutError())
    compacted = etcd_errors.RevisionCompactedError(5)
    assert not member_failed(compacted)
    assert isinstance(StoreUnavailable("x"), Exception)
