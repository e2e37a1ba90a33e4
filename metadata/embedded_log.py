"""The embedded store's durable form: a snapshot plus a log of the changes made since it
(KRaft's metadata log and snapshots, in JSON).

Owns two files: ``<path>``, the whole image as of one metadata offset, and ``<path>.log``, one
JSON record per change after it, each fsynced before the change is acknowledged. Loading reads
the snapshot and replays the records past its offset. A torn last record (the process died
while writing it, so it was never acknowledged) is cut off. Once the log has outgrown the
snapshot a new snapshot is written and the log starts again, so a change costs what it
changed, amortized, instead of a rewrite of every topic.

Differs from Kafka: a record is a delta of the JSON image ("these values, these map entries
now", an entry of ``None`` deletes), not a typed metadata record; one snapshot is kept, not
one per interval.
"""

from __future__ import annotations

import json
import os

from storage.checkpoint import write_atomically

__all__ = ["MetadataLog", "MIN_LOG_BYTES_BEFORE_SNAPSHOT"]

MIN_LOG_BYTES_BEFORE_SNAPSHOT = 1 << 20


class MetadataLog:
    """Snapshot + change log of one JSON image whose ``metadata_offset`` numbers its changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.log_path = path + ".log"
        self._snapshot_bytes = 0
        self._log_bytes = 0

    def load(self) -> dict | None:
        """The image: the snapshot with every later record applied (None: a new store)."""
        try:
            with open(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        image = json.loads(text)
        self._snapshot_bytes = len(text)
        for record in self._read_records():
            if record["offset"] > image.get("metadata_offset", 0):
                apply_record(image, record)
        return image

    def _read_records(self) -> list[dict]:
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        records, good_end = [], 0
        lines = data.split(b"\n")
        for number, line in enumerate(lines[:-1], 1):  # the part after the last newline is torn
            try:
                records.append(json.loads(line))
            except ValueError:
                if number < len(lines) - 1:
                    raise ValueError(f"{self.log_path}: record {number} is corrupt") from None
                break  # a torn last line that happens to end in a newline byte
            good_end += len(line) + 1
        if good_end < len(data):
            with open(self.log_path, "r+b") as f:
                f.truncate(good_end)
        self._log_bytes = good_end
        return records

    def append(self, record: dict) -> None:
        """One change, durable before this returns."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._log_bytes += len(line)

    @property
    def wants_snapshot(self) -> bool:
        return self._log_bytes > max(self._snapshot_bytes, MIN_LOG_BYTES_BEFORE_SNAPSHOT)

    def write_snapshot(self, image: dict) -> None:
        """The whole image; the records it includes are dropped after it is in place (a crash
        in between leaves records the next load skips by their offsets)."""
        text = json.dumps(image, separators=(",", ":"))
        write_atomically(self.path, text)
        self._snapshot_bytes = len(text)
        if self._log_bytes:
            os.truncate(self.log_path, 0)
            self._log_bytes = 0


def apply_record(image: dict, record: dict) -> None:
    image.update(record.get("values", {}))
    for name, entries in record.get("entries", {}).items():
        target = image.setdefault(name, {})
        for key, value in entries.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
