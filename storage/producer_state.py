"""Per-partition producer state: what makes idempotent produce exactly-once.

For each producer id the partition keeps its epoch and the metadata of its last five batches
(first/last sequence, last offset, timestamp). A retried batch that matches one of them is
answered as success with the original offset (unless it repeats a batch of a transaction
that has ended: see :func:`_in_current_txn`); a batch that does not follow the last sequence
gets OUT_OF_ORDER_SEQUENCE_NUMBER; a batch from an older epoch gets INVALID_PRODUCER_EPOCH.

State is snapshotted to ``<offset>.snapshot`` at segment roll and clean shutdown and rebuilt
from the batch headers of the log tail after an unclean stop, as Kafka does. The snapshot
format is our own (a CRC32C-guarded struct list), not Kafka's.

Transactions: the first offset of each producer's open transaction bounds the last stable
offset (LSO); a COMMIT/ABORT marker completes it (a :class:`CompletedTxn`), and the LSO keeps
counting a completed transaction until the high watermark passes its marker. Batch checks
depend on the append's origin, as in Kafka: sequence checks for clients only, epoch checks
for clients and the coordinators (markers, transactional offset commits), none for
replication and recovery.

Verification guards (Kafka's ``VerificationStateEntry``, KIP-890 part 1): a transactional batch
that would start a transaction here is appended only after the transaction coordinator has
confirmed the partition is in the producer's ongoing transaction. The confirmation is awaited;
a marker may land meanwhile (the transaction ended), and the batch must then not open a new
transaction nobody will end (or that a later COMMIT of the same epoch would adopt). So a guard
is taken before the wait, any marker of the producer clears it, and the append requires it.
"""

from __future__ import annotations

import os
import struct
import time
from collections import deque
from dataclasses import dataclass, field

import crc32c

from protocol import records as rb
from protocol.errors import ErrorCode, KafkaError

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = (1 << 31) - 1


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue: a marker at it ends a producer that overflowed


class AppendOrigin:
    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


def _in_current_txn(entry: ProducerEntry, batch: BatchMetadata) -> bool:
    """Whether ``batch`` belongs to the producer's open transaction on this partition.

    Where we knowingly differ from Kafka: its duplicate check also answers a batch of an ended
    transaction (same epoch) with that batch's offsets. Under transaction version 1 the epoch
    stays across transactions, and librdkafka rewinds its sequences over messages an abort
    purged, including ones whose produce had been appended after all: its next transaction's
    batch then repeats their sequences and would be acknowledged at aborted offsets."""
    return 0 <= entry.current_txn_first_offset <= batch.first_offset


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self, directory: str, expiration_ms: int = 86_400_000) -> None:
        self.dir = directory
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction: every entry whose
        # current_txn_first_offset >= 0, kept beside ``producers`` so that the last stable
        # offset, read on every fetch, costs the open transactions and not every producer.
        self._open: dict[int, int] = {}
        self.last_snapshot_offset = -1
        # Completed transactions whose marker is not yet below the high watermark.
        self.unreplicated_txns: list[CompletedTxn] = []
        # producer id -> (epoch, guard, transaction version 2?) while a verification (or the
        # implicit add of transaction version 2) of its next transaction is out.
        self.verification_guards: dict[int, tuple[int, object, bool]] = {}

    # --- the append path ---------------------------------------------------------------------

    def check(self, header: rb.BatchHeader, origin: str = AppendOrigin.CLIENT) -> BatchMetadata | None:
        """Validate a data batch; return the original batch if it is a client's duplicate.

        Raises KafkaError(INVALID_PRODUCER_EPOCH / OUT_OF_ORDER_SEQUENCE_NUMBER /
        INVALID_TXN_STATE).
        """
        pid = header.producer_id
        if pid == rb.NO_PRODUCER_ID or origin == AppendOrigin.REPLICATION:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            return None  # unknown producer: accepted, as current Kafka does (KIP-360)
        epoch = header.producer_epoch
        if epoch < entry.producer_epoch:
            raise KafkaError(ErrorCode.invalid_producer_epoch,
                             f"epoch {epoch} is older than the current epoch {entry.producer_epoch}")
        if origin == AppendOrigin.CLIENT:
            duplicate = self._check_sequence(entry, header)
            if duplicate is not None:
                return duplicate
        if not header.is_transactional and entry.current_txn_first_offset >= 0:
            raise KafkaError(ErrorCode.invalid_txn_state,
                             f"Expected transactional write from producer {pid} at offset "
                             f"{entry.current_txn_first_offset}, got a non-transactional batch")
        return None

    @staticmethod
    def _check_sequence(entry: ProducerEntry, header: rb.BatchHeader) -> BatchMetadata | None:
        first_seq, last_seq = header.base_sequence, header.last_sequence
        if header.producer_epoch > entry.producer_epoch:
            # A new epoch starts its sequences at 0 (a bump by the coordinator, or an
            # idempotent producer's local bump after an unresolved sequence).
            if first_seq != 0 and entry.producer_epoch != rb.NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.out_of_order_sequence_number,
                                 f"new epoch {header.producer_epoch} must start at sequence 0, "
                                 f"got {first_seq}")
            return None
        duplicate = entry.find_duplicate(first_seq, last_seq)
        if duplicate is not None:
            if header.is_transactional and not _in_current_txn(entry, duplicate):
                raise KafkaError(ErrorCode.out_of_order_sequence_number,
                                 f"sequences {first_seq}-{last_seq} repeat a batch of a transaction that "
                                 f"has ended (at offset {duplicate.first_offset}); expected sequence "
                                 f"{entry.last_seq + 1}")
            return duplicate
        # No batch at this epoch yet (a transaction version 2 marker bumped it): only
        # sequence 0 is next, as Kafka's NO_SEQUENCE. Accepting any would let a later batch
        # of the transaction in while its first is still being retried.
        if entry.producer_epoch != rb.NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(ErrorCode.out_of_order_sequence_number,
                             f"expected sequence {entry.last_seq + 1}, got {first_seq}")
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     transaction_version: int = 0) -> None:
        """A coordinator's COMMIT/ABORT marker: producer epoch first, then coordinator epoch.

        Under transaction version 2 the coordinator bumped the epoch to end the transaction,
        so the marker's must be newer than the producer's data (KIP-1228); the same epoch is
        only a retry of a marker already written (no transaction open, Kafka's KAFKA-19999)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        current = entry.producer_epoch
        if transaction_version >= 2:
            retry = producer_epoch == current and (entry.current_txn_first_offset < 0
                                                   or producer_epoch == MAX_PRODUCER_EPOCH)
            if producer_epoch <= current and not retry:
                raise KafkaError(ErrorCode.invalid_producer_epoch,
                                 f"marker epoch {producer_epoch} is not newer than {current} (TV2)")
        elif producer_epoch < current:
            raise KafkaError(ErrorCode.invalid_producer_epoch,
                             f"marker epoch {producer_epoch} is older than {current}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.transaction_coordinator_fenced,
                             f"coordinator epoch {coordinator_epoch} is older than "
                             f"{entry.coordinator_epoch}")

    def needs_verification(self, header: rb.BatchHeader) -> bool:
        """KIP-890: a transactional batch that would start a transaction on this partition."""
        if not header.is_transactional:
            return False
        entry = self.producers.get(header.producer_id)
        return (entry is None or entry.current_txn_first_offset < 0
                or entry.producer_epoch != header.producer_epoch)

    def start_verification(self, producer_id: int, producer_epoch: int, supports_epoch_bump: bool = False) -> object:
        """The guard a verification of ``producer_id``'s transaction holds while it waits
        (Kafka's ``maybeCreateVerificationStateEntry``: one already out for the epoch is shared).
        ``supports_epoch_bump``: the implicit add of transaction version 2, whose guard the
        previous transaction's marker (at the same, bumped, epoch) leaves in place."""
        current = self.verification_guards.get(producer_id)
        if current is not None and current[0] == producer_epoch:
            return current[1]
        guard = object()
        self.verification_guards[producer_id] = (producer_epoch, guard, supports_epoch_bump)
        return guard

    def check_verification(self, header: rb.BatchHeader, guard: object) -> None:
        """INVALID_TXN_STATE if the batch would start a transaction and ``guard`` is no longer
        the producer's (a marker ended the transaction while its verification waited)."""
        if not self.needs_verification(header):
            return
        current = self.verification_guards.get(header.producer_id)
        if current is None or current[0] != header.producer_epoch or current[1] is not guard:
            raise KafkaError(ErrorCode.invalid_txn_state,
                             "The transaction ended while the partition was being verified")

    def update(self, header: rb.BatchHeader, control_type: int | None = None,
               coordinator_epoch: int = -1) -> CompletedTxn | None:
        """Record an appended batch (append path or recovery); a control batch (with its
        ``control_type``) completes the producer's open transaction, if any."""
        pid = header.producer_id
        if pid == rb.NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
        elif header.producer_epoch > entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        entry.last_timestamp = header.max_timestamp
        if header.is_control:
            guard = self.verification_guards.get(pid)
            # A TV2 guard at the marker's epoch belongs to the next transaction: the coordinator
            # bumped the epoch to end this one, and the producer already uses the bumped one.
            if guard is None or not (guard[2] and guard[0] == header.producer_epoch):
                self.verification_guards.pop(pid, None)
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            first = entry.current_txn_first_offset
            entry.current_txn_first_offset = -1
            self._open.pop(pid, None)
            if first < 0 or control_type is None:
                return None
            return CompletedTxn(pid, first, header.base_offset, control_type == rb.CONTROL_ABORT)
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = self._open[pid] = header.base_offset
            self.verification_guards.pop(pid, None)  # used: the transaction started here
        if header.base_sequence != rb.NO_SEQUENCE:
            entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                               header.last_offset, header.last_offset_delta,
                                               header.max_timestamp))
        return None

    # --- the last stable offset ----------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an open transaction, or of a completed one whose
        marker is not yet below the high watermark."""
        firsts = list(self._open.values())
        firsts.extend(t.first_offset for t in self.unreplicated_txns)
        return min(firsts) if firsts else None

    def on_completed(self, txn: CompletedTxn, high_watermark: int) -> None:
        if txn.last_offset >= high_watermark:
            self.unreplicated_txns.append(txn)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self.unreplicated_txns:
            self.unreplicated_txns = [t for t in self.unreplicated_txns if t.last_offset >= high_watermark]

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return dict(self._open)

    def remove_expired(self, now_ms: int | None = None) -> int:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_and_reload(self) -> None:
        self.producers.clear()
        self._open.clear()
        self.unreplicated_txns.clear()

    # --- snapshots ---------------------------------------------------------------------------

    _ENTRY = struct.Struct(">qhqiqB")
    _BATCH = struct.Struct(">iiqiq")

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.dir, f"{offset:020d}.snapshot")

    def take_snapshot(self, offset: int) -> None:
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            body += self._ENTRY.pack(e.producer_id, e.producer_epoch, e.last_timestamp,
                                     e.coordinator_epoch, e.current_txn_first_offset, len(e.batches))
            for b in e.batches:
                body += self._BATCH.pack(b.first_seq, b.last_seq, b.last_offset, b.offset_delta,
                                         b.timestamp)
        path = self.snapshot_path(offset)
        with open(path + ".tmp", "wb") as f:
            f.write(struct.pack(">I", crc32c.crc32c(bytes(body))) + body)
        os.replace(path + ".tmp", path)
        self.last_snapshot_offset = offset
        self._delete_snapshots(keep=2)

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(".snapshot"):
                try:
                    out.append(int(name[:-9]))
                except ValueError:
                    pass
        return sorted(out)

    def _delete_snapshots(self, keep: int) -> None:
        for offset in self.snapshot_offsets()[:-keep]:
            try:
                os.unlink(self.snapshot_path(offset))
            except FileNotFoundError:
                pass

    def delete_snapshots_above(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                os.unlink(self.snapshot_path(off))

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below ``max_offset``; return its offset or -1."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                continue
            try:
                self._load(self.snapshot_path(offset))
                self.last_snapshot_offset = offset
                return offset
            except (ValueError, struct.error, OSError):
                continue
        self.producers.clear()
        self._open.clear()
        return -1

    def _load(self, path: str) -> None:
        with open(path, "rb") as f:
            data = f.read()
        (crc,) = struct.unpack_from(">I", data, 0)
        if crc32c.crc32c(data[4:]) != crc:
            raise ValueError("snapshot CRC mismatch")
        pos = 4
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        producers = {}
        for _ in range(count):
            pid, epoch, ts, coord_epoch, txn_first, n = self._ENTRY.unpack_from(data, pos)
            pos += self._ENTRY.size
            entry = ProducerEntry(pid, epoch, last_timestamp=ts, coordinator_epoch=coord_epoch,
                                  current_txn_first_offset=txn_first)
            for _ in range(n):
                entry.batches.append(BatchMetadata(*self._BATCH.unpack_from(data, pos)))
                pos += self._BATCH.size
            producers[pid] = entry
        self.producers = producers
        self._open = {pid: e.current_txn_first_offset for pid, e in producers.items()
                      if e.current_txn_first_offset >= 0}
