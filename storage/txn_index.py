"""The aborted-transaction index (``.txnindex``): which offset ranges belong to aborted
transactions, so read_committed fetches can tell consumers what to drop.

Entries use Kafka's AbortedTxn layout (34 bytes): version int16 (0), producer id int64,
first offset int64, last offset int64 (the ABORT marker), last stable offset int64. Each
entry lives in the ``.txnindex`` of the segment that holds its ABORT marker; the partition
keeps all entries in memory too (they are few), ordered by last offset.

Differs from Kafka: one in-memory list per partition rather than a file scan per segment at
fetch time; entries in segments that recovery re-scans are rebuilt from the markers.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def read_index(path: str) -> list[AbortedTxn]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    raw = raw[: len(raw) - len(raw) % ENTRY_SIZE]
    return [AbortedTxn(pid, first, last, lso) for _v, pid, first, last, lso in _ENTRY.iter_unpack(raw)]


def append_entry(path: str, entry: AbortedTxn) -> None:
    with open(path, "ab") as f:
        f.write(entry.encode())


def rewrite_index(path: str, entries: list[AbortedTxn]) -> None:
    if not entries:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    with open(path + ".tmp", "wb") as f:
        f.write(b"".join(e.encode() for e in entries))
    os.replace(path + ".tmp", path)


class AbortedTxnList:
    """All aborted transactions of a partition, ordered by their marker offset."""

    def __init__(self) -> None:
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []

    def add(self, entry: AbortedTxn) -> bool:
        """Insert unless already present (replay after recovery); True if added."""
        i = bisect.bisect_left(self._last_offsets, entry.last_offset)
        if i < len(self.entries) and self.entries[i].last_offset == entry.last_offset:
            return False
        self.entries.insert(i, entry)
        self._last_offsets.insert(i, entry.last_offset)
        return True

    def collect(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound_offset) (Kafka's
        collectAbortedTxns): marker at or after the start, first offset before the bound."""
        i = bisect.bisect_left(self._last_offsets, start_offset)
        return [e for e in self.entries[i:] if e.first_offset < upper_bound_offset]

    def truncate_from(self, offset: int) -> None:
        """Forget entries whose marker is at or above ``offset`` (log truncation)."""
        i = bisect.bisect_left(self._last_offsets, offset)
        del self.entries[i:], self._last_offsets[i:]

    def drop_before(self, log_start_offset: int) -> None:
        """Forget entries wholly below the log start (their segments were deleted)."""
        i = bisect.bisect_left(self._last_offsets, log_start_offset)
        del self.entries[:i], self._last_offsets[:i]
