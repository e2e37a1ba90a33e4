"""A deterministic record workload for client round-trip tests, and its verifiers.

``make_records(n, partitions)`` gives ``n`` records with explicit partitions, keys (some
empty, some null), values of varied sizes (empty, null, a few bytes up to ~48 KiB),
0-4 headers (repeated keys, empty and null values, non-ASCII keys) and explicit,
non-monotonic CreateTime timestamps an hour in the past (well inside retention).

Every non-empty value is compressible: librdkafka sends a batch uncompressed when its
compressed form would be larger, and the tests assert that the stored codec is the one the
client asked for.

Consumed messages are normalised to :class:`Got` by each test, then ``verify`` checks per
partition, in order and byte-exact, with contiguous offsets from 0; ``stored_batches``
reads the broker's segment files back for the codec check.
"""

from __future__ import annotations

import functools
import glob
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from protocol import records as rb

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {name: i for i, name in rb.CODEC_NAMES.items()}


@dataclass(frozen=True, slots=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


@dataclass(frozen=True, slots=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


_HEADER_POOL: list[tuple[str, bytes | None]] = [
    ("trace-id", None),  # value filled per record
    ("null-header", None),
    ("empty-header", b""),
    ("dup", b"first"),
    ("dup", b"second"),
    ("ünïcødé-kéy", "välue ✓".encode()),
    ("bin", bytes(range(256)) * 2),
]


def _value(rng: random.Random, i: int) -> bytes | None:
    if i % 97 == 13:
        return None
    if i % 89 == 7:
        return b""
    if i % 499 == 3:
        size = rng.randint(16_000, 48_000)
    elif i % 47 == 5:
        size = rng.randint(1_000, 4_000)
    elif i % 31 == 2:
        size = rng.randint(1, 8)
    else:
        size = rng.randint(20, 400)
    # Half text that repeats (compressible), with a little noise so codecs have real work.
    unit = f"value-{i}|{'abcdefghij'[i % 10] * (i % 13)}|".encode()
    body = (unit * (size // len(unit) + 1))[:size]
    noise = rng.randbytes(min(16, size // 8))
    return body[: size - len(noise)] + noise


def _key(i: int) -> bytes | None:
    if i % 211 == 17:
        return None
    if i % 101 == 11:
        return b""
    return b"key-%08d" % i


def _headers(i: int, null_values: bool) -> tuple[tuple[str, bytes | None], ...]:
    n = i % 5
    if n == 0:
        return ()
    start = (i // 5) % len(_HEADER_POOL)
    out = []
    for j in range(n):
        k, v = _HEADER_POOL[(start + j) % len(_HEADER_POOL)]
        if k == "trace-id":
            v = b"trace-%d" % i
        if v is None and not null_values:
            continue
        out.append((k, v))
    return tuple(out)


@functools.lru_cache(maxsize=8)
def make_records(n: int, partitions: int, seed: int = 20240611, *,
                 null_header_values: bool = True) -> tuple[Rec, ...]:
    """``null_header_values=False`` for clients that refuse them (kafka-python).

    A record never has both a null key and a null value (kafka-python and aiokafka refuse it).
    """
    rng = random.Random(seed)
    # Whole seconds an hour ago: inside retention, and not in the future.
    base_ts = (int(time.time()) - 3600) * 1000
    out = []
    for i in range(n):
        # Spread unevenly so partitions get different counts; stay deterministic.
        p = (i * 7 + i // 13) % partitions
        ts = base_ts + i * 3 - (i % 11) * 40  # non-monotonic within a batch
        value = _value(rng, i)
        key = _key(i) if value is not None else (_key(i) or b"")
        out.append(Rec(p, key, value, _headers(i, null_header_values), ts))
    return tuple(out)


def by_partition(records) -> dict[int, list]:
    out: dict[int, list] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return out


def verify(expected: tuple[Rec, ...], got: list[Got], partitions: int) -> None:
    """Per partition: contiguous offsets from 0, and every field byte-exact, in order."""
    exp = by_partition(expected)
    act = by_partition(got)
    assert set(act) <= set(range(partitions)), f"records from unexpected partitions {sorted(act)}"
    problems = []
    for p in range(partitions):
        e, a = exp.get(p, []), sorted(act.get(p, []), key=lambda g: g.offset)
        offsets = [g.offset for g in a]
        if offsets != list(range(len(a))):
            dups = [o for o, c in Counter(offsets).items() if c > 1][:5]
            problems.append(f"partition {p}: offsets not contiguous from 0 "
                            f"(first {offsets[:5]}, last {offsets[-3:]}, duplicates {dups})")
            continue
        if len(a) != len(e):
            problems.append(f"partition {p}: consumed {len(a)} records, produced {len(e)}")
            continue
        for r, g in zip(e, a):
            diffs = [f for f in ("key", "value", "headers", "timestamp")
                     if getattr(r, f) != getattr(g, f)]
            if diffs:
                problems.append(
                    f"partition {p} offset {g.offset}: {', '.join(diffs)} differ: "
                    + "; ".join(f"{f}: sent {_short(getattr(r, f))} got {_short(getattr(g, f))}"
                                for f in diffs))
                break
    assert not problems, "\n".join(problems)


def _short(v) -> str:
    s = repr(v)
    return s if len(s) < 120 else s[:100] + f"...({len(s)} chars)"


def stored_batches(log_dir: str, topic: str, partition: int) -> list[tuple[rb.BatchHeader, bytes]]:
    """(header, records bytes) of every batch in the partition's segment files, in order."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        end = 0
        for pos, h in rb.iter_batches(data):
            rb.check_batch(data, pos)  # CRC intact on disk
            out.append((h, data[pos + rb.HEADER_SIZE : pos + h.size]))
            end = pos + h.size
        assert end == len(data), f"{path}: {len(data) - end} trailing bytes after the last batch"
    return out


# A client sends a batch uncompressed when compressing it does not make it smaller (librdkafka,
# kafka-python and aiokafka all do); framing differs between implementations (xerial snappy,
# lz4 frame options, gzip level), hence the slack.
FALLBACK_SLACK = 48


def verify_stored_codec(log_dir: str, topic: str, partitions: int, codec: str,
                        expected: Sequence) -> tuple[int, int]:
    """Every stored batch carries ``codec`` (attributes & 7), offsets on disk are contiguous.

    ``expected``: the produced records (anything with a ``.partition``), for the counts.

    The one exception is the clients' own fallback: an uncompressed batch that the
    codec could not have shrunk (checked by compressing its records here). Such batches
    must hold at most 5% of the records. Returns (batches, fallback batches).
    """
    want = CODEC_IDS[codec]
    counts = Counter(r.partition for r in expected)
    total = fallback = fallback_records = 0
    for p in range(partitions):
        stored = stored_batches(log_dir, topic, p)
        assert stored or not counts[p], f"no segment data for {topic}-{p} under {log_dir}"
        nxt = 0
        for h, body in stored:
            assert not h.is_control and h.magic == 2
            assert not h.attributes & rb.ATTR_LOG_APPEND_TIME, "CreateTime topic stamped LogAppendTime"
            assert h.base_offset == nxt, f"{topic}-{p}: batch at {h.base_offset}, expected {nxt}"
            assert h.record_count == h.last_offset_delta + 1
            nxt = h.next_offset
            total += 1
            if h.compression == want:
                continue
            name = rb.CODEC_NAMES.get(h.compression, h.compression)
            assert h.compression == rb.COMPRESSION_NONE, (
                f"{topic}-{p} offset {h.base_offset}: asked for {codec}, stored {name}")
            ours = len(rb.compress(want, body))
            assert ours > len(body) - FALLBACK_SLACK, (
                f"{topic}-{p} offset {h.base_offset}: asked for {codec}, stored uncompressed, "
                f"though {codec} shrinks its {len(body)} bytes of records to {ours}")
            fallback += 1
            fallback_records += h.record_count
        assert nxt == counts[p], f"{topic}-{p}: {nxt} records on disk, produced {counts[p]}"
    assert fallback_records <= 0.05 * len(expected), (
        f"{fallback_records} of {len(expected)} records stored uncompressed, asked for {codec}")
    return total, fallback
