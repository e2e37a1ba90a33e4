"""The writes: every change to cluster metadata, one compare-and-swap etcd transaction each.

Owns the writes of topics, partitions, configs, SCRAM credentials, client quotas, ACLs, feature
levels and producer-id blocks. Each compares what it depends on: a topic is created only if
absent, a partition changes only at the mod_revision its writer read (and, for controller
decisions, only while the controller key still has that controller's create_revision, the
fencing token of etcd's lease-based election), a producer-id block is taken only at the
counter's mod_revision. A transaction stays below etcd's operation limit: larger changes are
split, the topic key first. A write returns once this broker's image has applied it
(read-your-writes for the admin request that made it).

A write whose answer was lost (the member failed after the request was sent) is never sent
again blindly: the keys it writes are read back from the cluster and the write counts as
applied when they hold what it wrote (topic ids, producer-id block owners and partition epochs
make that unambiguous). Otherwise it is sent again with its compare intact, or, for a write
that compared nothing, with a compare on the revision just read, so that it can neither apply
twice nor overwrite a change made since.

Differs from Kafka: the controller does not serialize these through one metadata log; etcd's
transactions do, and a refused compare is answered as Kafka answers a stale request.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable

import structlog

from protocol.errors import ErrorCode, KafkaError
from security.acls import StandardAcl

from ..controller.producer_ids import PRODUCER_ID_BLOCK_SIZE
from ..records import PartitionState, TopicState
from .client import ETCD_ERRORS, FailoverEtcdClient, StoreUnavailable, WriteOutcomeUnknown
from .keys import MAX_TXN_OPS, KeySpace, chunks, dumps

__all__ = ["MetadataWriter", "WRITE_TIMEOUT_S"]

log = structlog.get_logger("metadata.etcd.writer")

WRITE_TIMEOUT_S = 15.0  # a write still unapplied after this answers REQUEST_TIMED_OUT
PARTITION_WRITES_IN_FLIGHT = 64  # partition records written at once by one alter_partitions

Check = Callable[[object | None], bool]  # a key's current kv (None: absent) -> holds our write


def unreachable(exc: BaseException | str) -> KafkaError:
    """REQUEST_TIMED_OUT, saying that no etcd member with a quorum answered, and the last reason."""
    return KafkaError(ErrorCode.request_timed_out,
                      f"metadata store unreachable (no etcd member with a quorum answered): {exc}"[:300])


class MetadataWriter:
    """The writes of one broker. ``wait_applied(revision)``: until the image has that revision."""

    def __init__(self, client: FailoverEtcdClient, keys: KeySpace, node_id: int,
                 wait_applied: Callable[[int], Awaitable[None]],
                 active_brokers: Callable[[], set[int]]) -> None:
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self.wait_applied = wait_applied
        self.active_brokers = active_brokers
        self.t = client.transactions
        self.write_timeout_s = WRITE_TIMEOUT_S
        self.unknown_outcomes = 0  # writes whose answer was lost and that were resolved by a read

    # --- one transaction, with a lost answer resolved by a read --------------------------------------

    async def txn(self, compare: list, success: list, checks: dict[bytes, Check] | None = None,
                  *, retry_compare: Callable[[dict], list] | None = None) -> tuple[bool, int]:
        """(succeeded, revision). ``checks``: for each key written, whether a kv holds this
        write; used only when the outcome is unknown. ``retry_compare``: for a write without
        compares, the compare to send it again with, given the kvs just read."""
        deadline = time.monotonic() + self.write_timeout_s
        try:
            ok, _responses, revision = await self._send(compare, success, deadline)
            return ok, revision
        except WriteOutcomeUnknown as exc:
            if checks is None:
                raise unreachable(exc) from exc
            self.unknown_outcomes += 1
            log.info("metadata_write_outcome_unknown", keys=[k.decode() for k in list(checks)[:3]],
                     error=str(exc)[:200], action="reading back the keys it wrote")
            return await self._resolve(compare, success, checks, retry_compare, deadline)

    async def _send(self, compare: list, success: list, deadline: float):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise unreachable("the write's deadline passed")
        try:
            return await self.client.transaction(compare, success, timeout=remaining)
        except StoreUnavailable as exc:
            raise unreachable(exc) from exc
        except WriteOutcomeUnknown:
            raise
        except ETCD_ERRORS as exc:
            raise unreachable(exc) from exc

    async def _resolve(self, compare, success, checks, retry_compare, deadline) -> tuple[bool, int]:
        while True:
            kvs, revision = await self._read_back(list(checks), deadline)
            if all(check(kvs.get(key)) for key, check in checks.items()):
                return True, revision
            again = compare if compare or retry_compare is None else retry_compare(kvs)
            try:
                ok, _responses, revision = await self._send(again, success, deadline)
            except WriteOutcomeUnknown:
                continue
            if ok:
                return True, revision
            # Refused: the first try may have landed meanwhile, else a concurrent change won.
            kvs, revision = await self._read_back(list(checks), deadline)
            applied = all(check(kvs.get(key)) for key, check in checks.items())
            return applied or retry_compare is not None, revision

    async def _read_back(self, keys: list[bytes], deadline: float) -> tuple[dict, int]:
        """The kvs of ``keys`` (absent ones left out) in one linearizable read: a transaction of
        reads only, one round trip and one revision for all the keys."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise unreachable("a write's outcome is unknown and could not be read back in time")
        try:
            _ok, responses, revision = await self.client.transaction(
                [], [self.t.get(k) for k in keys], timeout=remaining, write=False)
        except (StoreUnavailable, *ETCD_ERRORS) as exc:
            raise unreachable(f"a write's outcome is unknown and could not be read back: {exc}") from exc
        kvs = {}
        for r in responses:
            for kv in r.response_range.kvs:
                kvs[kv.key] = kv
        return kvs, revision

    @staticmethod
    def holds(value: bytes | None) -> Check:
        """A check: the key holds ``value`` (None: the key is absent)."""
        if value is None:
            return lambda kv: kv is None
        return lambda kv: kv is not None and kv.value == value

    @staticmethod
    def holds_json(field: str, expected: object) -> Check:
        """A check: the key holds JSON whose ``field`` is ``expected``."""
        return lambda kv: kv is not None and json.loads(kv.value).get(field) == expected

    async def _write_keys(self, values: dict[bytes, bytes | None]) -> int:
        """Puts (a None deletes) that compare nothing, in transactions under the operation
        limit; returns the revision of the last. A lost answer is resolved key by key."""
        revision = 0
        for chunk in chunks(list(values.items())):
            ops = [self.t.put(k, v) if v is not None else self.t.delete(k) for k, v in chunk]
            checks = {k: self.holds(v) for k, v in chunk}

            def compare_read(kvs: dict, chunk=chunk) -> list:
                return [self.t.mod(k) == kvs[k].mod_revision if k in kvs else self.t.version(k) == 0
                        for k, _ in chunk]
            _ok, rev = await self.txn([], ops, checks, retry_compare=compare_read)
            revision = max(revision, rev)
        return revision

    # --- topics ----------------------------------------------------------------------------------

    async def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str]) -> int:
        """Create ``name`` with one PartitionState per replica list (leader: the first active
        replica); the topic key and the first partitions in one transaction, the rest after it."""
        t = self.t
        topic_key = self.keys.key("topics", name)
        topic_id = str(uuid.uuid4())
        record = {"topic_id": topic_id, "configs": dict(configs), "partitions": len(assignment)}
        active = self.active_brokers()
        parts = [(self.keys.key("partitions", name, i), dumps(PartitionState.created(r, active).to_json()))
                 for i, r in enumerate(assignment)]
        first, rest = parts[:MAX_TXN_OPS - 1], parts[MAX_TXN_OPS - 1:]
        ok, revision = await self.txn([t.version(topic_key) == 0],
                                      [t.put(topic_key, dumps(record)), *(t.put(k, v) for k, v in first)],
                                      {topic_key: self.holds_json("topic_id", topic_id),
                                       **{k: self.holds(v) for k, v in first}})
        if not ok:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        created = revision
        for chunk in chunks(rest):
            ok, revision = await self.txn([t.create(topic_key) == created], [t.put(k, v) for k, v in chunk],
                                          {k: self.holds(v) for k, v in chunk})
            if not ok:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' was deleted while created")
        await self.wait_applied(revision)
        return revision

    async def delete_topic(self, topic: TopicState) -> None:
        t = self.t
        topic_key, parts_key = self.keys.key("topics", topic.name), self.keys.key("partitions", topic.name) + b"/"
        ok, revision = await self.txn(
            [t.version(topic_key) > 0],
            [t.delete(topic_key), t.delete(parts_key, self.keys.range_end(parts_key))],
            {topic_key: lambda kv: kv is None or json.loads(kv.value).get("topic_id") != topic.topic_id})
        if not ok:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{topic.name}' does not exist.")
        await self.wait_applied(revision)

    async def _topic_record(self, name: str) -> tuple[dict, int]:
        """The topic's record as stored now, and its mod_revision (for the compare)."""
        try:
            got = await self.client.get(self.keys.key("topics", name))
        except (StoreUnavailable, *ETCD_ERRORS) as exc:
            raise unreachable(exc) from exc
        if got is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        return json.loads(got.value), got.mod_revision

    async def _replace_topic_record(self, name: str, record: dict, mod_revision: int,
                                    extra: dict[bytes, bytes] | None = None) -> None:
        """Write ``record`` (after the ``extra`` keys) only if the topic is still at ``mod_revision``."""
        t = self.t
        topic_key = self.keys.key("topics", name)
        for chunk in chunks(list((extra or {}).items())):
            await self.txn([t.mod(topic_key) == mod_revision], [t.put(k, v) for k, v in chunk],
                           {k: self.holds(v) for k, v in chunk})
        value = dumps(record)
        ok, revision = await self.txn([t.mod(topic_key) == mod_revision], [t.put(topic_key, value)],
                                      {topic_key: self.holds(value)})
        if not ok:
            raise KafkaError(ErrorCode.request_timed_out, f"Topic '{name}' changed concurrently; retry")
        await self.wait_applied(revision)

    async def add_partitions(self, name: str, assignment: list[list[int]]) -> None:
        """Grow ``name`` by one partition per replica list: the new partition records first,
        the count last, so a reader never sees a missing one."""
        record, mod_revision = await self._topic_record(name)
        before = record["partitions"]
        record["partitions"] = before + len(assignment)
        active = self.active_brokers()
        parts = {self.keys.key("partitions", name, before + i): dumps(PartitionState.created(r, active).to_json())
                 for i, r in enumerate(assignment)}
        await self._replace_topic_record(name, record, mod_revision, parts)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        record, mod_revision = await self._topic_record(name)
        record["configs"] = dict(configs)
        await self._replace_topic_record(name, record, mod_revision)

    # --- partitions --------------------------------------------------------------------------------

    async def alter_partitions(self, changes: Iterable[tuple[str, int, PartitionState, int]],
                               controller_epoch: int | None = None, wait: bool = False,
                               broker_epochs: dict[int, int] | None = None) -> set[tuple[str, int]]:
        """Compare-and-swap partition records: each (topic, index, new state, expected
        mod_revision); with ``controller_epoch``, only while that controller is in office;
        with ``broker_epochs`` (an ISR a replica joins), only while each of those brokers is
        still in the life whose epoch its fetch named (KIP-903: the check Kafka's controller
        makes of AlterPartition's broker epochs). Returns the partitions written (a stale one
        is skipped, not retried)."""
        t = self.t
        guard = [] if controller_epoch is None else [t.create(self.keys.key("controller")) == controller_epoch]
        guard += [t.create(self.keys.key("alive", node)) == epoch
                  for node, epoch in sorted((broker_epochs or {}).items())]
        in_flight = asyncio.Semaphore(PARTITION_WRITES_IN_FLIGHT)

        async def write(topic: str, index: int, state: PartitionState, expected: int) -> tuple[bool, int]:
            key = self.keys.key("partitions", topic, index)
            value = dumps(state.to_json())
            async with in_flight:
                return await self.txn([*guard, t.mod(key) == expected], [t.put(key, value)], {key: self.holds(value)})

        # Each partition on its own (one stale record refuses only itself), many at once: etcd
        # batches concurrent proposals into one Raft round and one fsync, where writes one
        # after another cost a round each (a restart fencing 3000 partitions took 25 s so).
        changes = list(changes)
        outcomes = await asyncio.gather(*(write(*c) for c in changes), return_exceptions=True)
        failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failed is not None:
            raise failed
        written = {(topic, index) for (topic, index, _, _), (ok, _) in zip(changes, outcomes) if ok}
        revision = max((rev for ok, rev in outcomes if ok), default=0)
        if wait and revision:
            await self.wait_applied(revision)
        return written

    # --- configs, credentials, quotas, ACLs, features -------------------------------------------------

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's config overrides (none left: its key is deleted)."""
        key = self.keys.key("group_configs", group_id)
        await self.wait_applied(await self._write_keys({key: dumps(dict(configs)) if configs else None}))

    async def alter_scram_credentials(self, changes: dict[str, dict[str, dict]]) -> None:
        """Replace each named user's credentials in one transaction (empty: the user's key goes)."""
        if len(changes) > MAX_TXN_OPS:
            raise KafkaError(ErrorCode.policy_violation, f"At most {MAX_TXN_OPS} users can be altered at once")
        values = {self.keys.key("scram", user): dumps(creds) if creds else None for user, creds in changes.items()}
        await self.wait_applied(await self._write_keys(values))

    async def alter_client_quotas(self, changes: dict[str, dict[str, float]]) -> None:
        """Replace each named entity's quotas in one transaction (empty: the entity's key goes)."""
        if len(changes) > MAX_TXN_OPS:
            raise KafkaError(ErrorCode.policy_violation, f"At most {MAX_TXN_OPS} entities can be altered at once")
        values = {self.keys.key("quotas", e): dumps(q) if q else None for e, q in changes.items()}
        await self.wait_applied(await self._write_keys(values))

    async def create_acls(self, acls: list[StandardAcl]) -> None:
        """Put each ACL under its content-derived key (the same ACL twice is one key)."""
        values = {self.keys.key("acls", acl.acl_id): dumps(acl.to_json()) for acl in acls}
        revision = await self._write_keys(values)
        if revision:
            await self.wait_applied(revision)

    async def delete_acls(self, acl_ids: set[str]) -> None:
        revision = await self._write_keys({self.keys.key("acls", acl_id): None for acl_id in sorted(acl_ids)})
        if revision:
            await self.wait_applied(revision)

    async def update_features(self, levels: dict[str, int], expected_epoch: int) -> bool:
        """Finalize ``levels`` by compare-and-swap on the ``features`` key (its mod_revision is
        the epoch the levels were planned on; 0: never written); False when it moved."""
        key = self.keys.key("features")
        value = dumps(levels)
        ok, revision = await self.txn([self.t.mod(key) == expected_epoch], [self.t.put(key, value)],
                                      {key: self.holds(value)})
        if ok:
            await self.wait_applied(revision)
        return ok

    # --- producer ids -------------------------------------------------------------------------------

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        """Take the next block by compare-and-swap on ``producer_id_block``, retried on a race.
        The value names its taker (``owner``: a fresh id per try), so a try whose answer was
        lost is known to have taken the block or not."""
        t = self.t
        key = self.keys.key("producer_id_block")
        for _ in range(50):
            try:
                got = await self.client.get(key)
            except (StoreUnavailable, *ETCD_ERRORS) as exc:
                raise unreachable(exc) from exc
            start = json.loads(got.value)["next"] if got is not None else 0
            owner = f"{self.node_id}-{uuid.uuid4().hex}"
            compare = [t.mod(key) == got.mod_revision] if got is not None else [t.version(key) == 0]
            ok, _ = await self.txn(compare, [t.put(key, dumps({"next": start + PRODUCER_ID_BLOCK_SIZE, "owner": owner}))],
                                   {key: self.holds_json("owner", owner)})
            if ok:
                return start, PRODUCER_ID_BLOCK_SIZE
        raise KafkaError(ErrorCode.coordinator_load_in_progress, "producer-id block contended; retry")

    # --- brokers -------------------------------------------------------------------------------------

    async def unregister_broker(self, node_id: int) -> None:
        """Remove a registration (UnregisterBroker)."""
        key = self.keys.key("brokers", node_id)
        ok, revision = await self.txn([self.t.version(key) > 0], [self.t.delete(key)], {key: self.holds(None)})
        if not ok:
            raise KafkaError(ErrorCode.broker_id_not_registered, f"Broker ID {node_id} is not currently registered")
        await self.wait_applied(revision)

