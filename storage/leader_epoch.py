"""The leader epoch cache (``leader-epoch-checkpoint``): where each leader epoch began.

Answers OffsetForLeaderEpoch exactly as Kafka's LeaderEpochFileCache.endOffsetFor does, so
consumers can validate their position after a leader change and detect truncation.

Differs from Kafka: a leader's new epoch (``assign(..., persist=False)``, as make_leader does)
is written to the file only before the first record of that epoch (``Log._write``), where
Kafka writes it when the leadership begins. An epoch that holds no record yet tells nothing
after a restart (loading drops the epochs starting at or after the log end, as Kafka's
truncateFromEnd does), so a broker restarted with thousands of idle partitions, or taking
over their leadership, rewrites none of their files.
"""

from __future__ import annotations

import bisect
import os

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.epochs: list[int] = []
        self.start_offsets: list[int] = []
        self.unsaved = False  # an epoch assigned since the file was last written
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path) as f:
                lines = f.read().split("\n")
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, offset = line.split()
                self.epochs.append(int(epoch))
                self.start_offsets.append(int(offset))
        except (FileNotFoundError, IndexError, ValueError):
            self.epochs, self.start_offsets = [], []

    def _save(self) -> None:
        lines = ["0", str(len(self.epochs))] + [f"{e} {o}" for e, o in zip(self.epochs, self.start_offsets)]
        with open(self.path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(self.path + ".tmp", self.path)
        self.unsaved = False

    def save_if_unsaved(self) -> None:
        """Before a record is written: the epochs it may belong to are in the file first."""
        if self.unsaved:
            self._save()

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, persist: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless it is newer);
        without ``persist``, the file is written before the epoch's first record."""
        if self.epochs and epoch <= self.epochs[-1]:
            return
        while self.start_offsets and self.start_offsets[-1] >= start_offset and self.epochs:
            self.epochs.pop()
            self.start_offsets.pop()
        self.epochs.append(epoch)
        self.start_offsets.append(start_offset)
        if persist:
            self._save()
        else:
            self.unsaved = True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the epochs that start at or after ``end_offset`` (they hold no record below it),
        as Kafka's truncateFromEnd."""
        changed = False
        while self.start_offsets and self.start_offsets[-1] >= end_offset:
            self.epochs.pop()
            self.start_offsets.pop()
            changed = True
        if changed:
            self._save()

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` belongs to: the last one starting at or before
        it, or -1 when every epoch starts after it (Kafka's epochForOffset)."""
        i = bisect.bisect_right(self.start_offsets, offset)
        return self.epochs[i - 1] if i else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        if requested_epoch == UNDEFINED_EPOCH or not self.epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self.epochs, requested_epoch)
        if higher >= len(self.epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self.start_offsets[0]
        return self.epochs[higher - 1], self.start_offsets[higher]
