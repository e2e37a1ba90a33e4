"""Kafka's offset checkpoint files (``recovery-point-offset-checkpoint`` and friends).

Format as Kafka writes them: a version line ``0``, a count line, then ``topic partition offset``
lines; written to a temp file, fsynced and renamed so a crash leaves the old or the new file.
"""

from __future__ import annotations

import os


def write_atomically(path: str, text: str) -> None:
    """A temp file, fsynced, renamed over ``path``: a crash leaves the old file or the new."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    write_atomically(path, "\n".join(lines) + "\n")


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return {}
    out = {}
    try:
        count = int(lines[1])
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError):
        return {}
    return out
