"""The analysis half of the exactly-once checker: finds Jepsen's Kafka anomalies in a history.

Owns :func:`check` (history in, :class:`Result` out) and nothing else: no broker, no plots, no
files (the small CLI at the bottom only prints the verdict line). It follows Jepsen's
``jepsen.tests.kafka`` checker: a *version order* per key (partition) built from every offset
observed (sends of transactions that must have committed, and every poll), from which come
``lost-write``, ``duplicate``, ``inconsistent-offsets``, ``G1a``, ``precommitted-read``, the
per-process and in-transaction ``poll-skip`` / ``nonmonotonic-*`` cases, and a dependency
graph (ww, wr, rw and process edges) searched for cycles.

Where it knowingly differs from Jepsen:

- ``final-read`` (a read of every key to its end after the run, at the run's isolation) counts
  as a read everywhere values are crossed off (lost-write, unseen, G1a), but is not a
  transaction: it is no node of the graph and is not checked for skips (a skip in it is a lost
  write, reported as such). Keys it lists in ``extra["incomplete"]`` are not copier-checked.
- Jepsen's ``lost-write`` needs a later value of the key read, so a write lost at the tail of
  its key goes unnoticed there (only its ``unseen`` stat). Here a complete final read (one
  whose ``extra["incomplete"]`` does not list the key, taken once every fault is healed)
  closes that gap: a write that must have committed and is not in it is a ``lost-write``.
- A value counts as read if any poll returned it (ok, info or fail completions alike: pollers
  must only ever emit safe data); G1a is flagged for any reader, not only ok ones, and only
  when *every* write of the value failed (a copier may re-send a value an aborted try sent).
- Proof that an indeterminate (info) write committed is a read of one of its values by an ok
  reader (the final read included); at ``read_uncommitted`` no read proves it.
- ``precommitted-read`` is Jepsen's (a transaction polls a value it sent itself) plus a read
  that completed before its writer was even invoked (a read from the future).
- Cycles: Jepsen links ww and wr edges only (rw is commented out there) and, with ww edges,
  allows G1c altogether. Here rw and process edges are added too, but since a Kafka poll is
  no snapshot (batches stop anywhere, partitions become visible one by one) the G-single/G2
  cycles rw edges give are allowed by default, for information. A G1c is allowed only when it
  needs a ww edge (writes are never isolated): a cycle of wr edges alone (``G1c``), or of wr
  and process edges (``G1c-process``), is circular information flow, always bad; those two
  searches run first so that the time budget only ever cuts informational ones. G0-process
  and the -realtime variants are not searched (no realtime edges; the read from the future
  above covers the shortest case). Cycle counts stop at MAX_CYCLES_PER_SEARCH per search.
  SCCs come from an iterative Tarjan and each cycle from a breadth-first search inside one
  SCC, not from networkx, whose graphs cost ~400 bytes an edge: a 500k-value history has
  millions of edges.
- Subscribers may be rebalanced, so their ``poll-skip``/``nonmonotonic-poll`` cases are
  allowed per case (only for their processes' polls), not for the whole run. Processes that
  recorded an ok ``subscribe`` count as subscribers too.
- The copier checks (``copy`` + ``committed-offsets`` ops) have no Jepsen counterpart: every
  input value below the group's committed offset must be in the output exactly once
  (``lost-write`` / ``duplicate``), in input order (``nonmonotonic-send``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .history import CLIENT_FS, FAIL, INFO, INVOKE, OK, Op, read_history

READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"

# Jepsen's allowed-error-types: writes are never isolated (G0, int-send-skip); rw edges from
# polls are not sound in Kafka (see the module docstring), so their cycles only inform.
DEFAULT_ALLOWED = frozenset({
    "int-send-skip", "G0", "G0-process", "G0-realtime",
    "G-single", "G-single-process", "G2", "G2-process",
})
# Allowed for the polls of subscribed processes only: a rebalance moves their positions.
SUBSCRIBE_ALLOWED = frozenset({"poll-skip", "nonmonotonic-poll"})

MAX_EXAMPLES = 20
MAX_CYCLES_PER_SEARCH = 20
CYCLE_BUDGET_S = 20.0  # for the cycle searches after the graph is built
TRIM_PAIRS = 30  # ops with more read pairs than this are shown around the values at issue

# Verdict-line order: the most severe first.
KIND_ORDER = (
    "lost-write", "duplicate", "G1a", "inconsistent-offsets", "precommitted-read", "G1c",
    "G1c-process", "nonmonotonic-send", "nonmonotonic-poll", "poll-skip", "int-poll-skip",
    "int-nonmonotonic-poll", "int-nonmonotonic-send", "int-send-skip", "G-single",
    "G-single-process", "G2", "G2-process", "G0", "G0-process",
)

WW, WR, RW, PROCESS = "ww", "wr", "rw", "process"
EDGE_PREFERENCE = (WW, WR, PROCESS, RW)  # an edge with several kinds is labelled the weakest
_TYPE_RANK = {OK: 2, INFO: 1, FAIL: 0}


@dataclass
class Anomaly:
    kind: str
    description: str
    ops: list[dict]
    allowed: bool = False  # allowed by the allowed set or a per-case rule (subscriber, ww)

    def to_json(self) -> dict:
        return {"kind": self.kind, "description": self.description, "ops": self.ops,
                "allowed": self.allowed}


@dataclass
class Result:
    valid: bool
    counts: dict[str, int]
    anomalies: dict[str, list[Anomaly]]
    stats: dict
    bad_error_types: list[str] = field(default_factory=list)  # Jepsen's name: kinds that fail it

    def to_json(self) -> dict:
        return {"valid": self.valid, "counts": self.counts, "bad-error-types": self.bad_error_types,
                "anomalies": {k: [a.to_json() for a in v] for k, v in self.anomalies.items()},
                "stats": self.stats}

    def verdict_line(self) -> str:
        head = f"valid: {'true' if self.valid else 'false'}"
        if not self.counts:
            return head + "  (no anomalies)"
        kinds = sorted(self.counts, key=_kind_rank)
        kinds = [k for k in kinds if k in self.bad_error_types] + \
                [k for k in kinds if k not in self.bad_error_types]
        return head + "  " + " ".join(f"{k}={self.counts[k]}" for k in kinds)


def _kind_rank(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind)


# --------------------------------------------------------------------------- micro-operations

def _pair(x: Any) -> tuple[int | None, Any]:
    """A send's ``[offset, value]`` once completed, or a bare value (not completed)."""
    if isinstance(x, list | tuple):
        return x[0], x[1]
    return None, x


def op_reads(op: Op) -> dict[str, list]:
    """Key -> the ``[offset, value]`` pairs an op polled, in the order returned."""
    if op.f == "final-read":
        return op.value or {}
    reads: dict[str, list] = {}
    for mop in op.value or ():
        if mop[0] == "poll" and len(mop) > 1 and mop[1]:
            for k, pairs in mop[1].items():
                reads[k] = reads[k] + list(pairs) if k in reads else pairs
    return reads


def op_writes(op: Op) -> dict[str, list[tuple[int | None, Any]]]:
    """Key -> the ``(offset, value)`` pairs an op sent, offset None where unknown."""
    writes: dict[str, list] = {}
    for mop in op.value or ():
        if mop[0] == "send":
            writes.setdefault(mop[1], []).append(_pair(mop[2]))
    return writes


# --------------------------------------------------------------------------- op rendering

def _op_dict(op: Op, focus: dict[str, Iterable] | None = None) -> dict:
    """The op as a dict; a big one is trimmed to the keys (and values near those) in focus."""
    d = {"index": op.index, "time": op.time, "process": op.process, "type": op.type, "f": op.f,
         "value": op.value, "error": op.error, "extra": op.extra}
    if op.f == "final-read" or (op.f in CLIENT_FS and _read_size(op) > TRIM_PAIRS):
        d["value"] = _trimmed_value(op, focus or {})
        d["extra"] = {**op.extra, "trimmed": True}
    return d


def _read_size(op: Op) -> int:
    return sum(len(p) for p in op_reads(op).values())


def _window(pairs: list, values: set, width: int = 2) -> list:
    """The pairs within `width` of those holding `values` (the first few if none is given)."""
    if not values:
        return list(pairs[:width + 1])
    hits = [i for i, p in enumerate(pairs) if p[1] in values]
    keep: set[int] = set()
    for i in hits[:4]:
        keep.update(range(max(0, i - width), min(len(pairs), i + width + 1)))
    return [pairs[i] for i in sorted(keep)]


def _trimmed_value(op: Op, focus: dict[str, Iterable]) -> Any:
    focus = {k: {v for v in vs if v is not None} for k, vs in focus.items()}
    if op.f == "final-read":
        return {k: _window(pairs, focus[k]) for k, pairs in (op.value or {}).items() if k in focus}
    mops = op.value or []
    sends: dict[str, list[int]] = defaultdict(list)  # key -> positions of its sends in the op
    for i, mop in enumerate(mops):
        if mop[0] == "send":
            sends[mop[1]].append(i)
    kept: set[int] = set()
    for k, positions in sends.items():
        if not focus or k in focus:
            pairs = [_pair(mops[i][2]) for i in positions]
            window = set(_window(pairs, focus.get(k, set())))
            kept.update(positions[j] for j, p in enumerate(pairs) if p in window)
    out = []
    for i, mop in enumerate(mops):
        if mop[0] == "poll" and len(mop) > 1 and mop[1]:
            out.append(["poll", {k: _window(pairs, focus.get(k, set())) for k, pairs in mop[1].items()
                                 if not focus or k in focus}])
        elif i in kept:
            out.append(mop)
    return out


# --------------------------------------------------------------------------- findings

class _Findings:
    """Counts every case; keeps the first MAX_EXAMPLES per kind (bad ones before allowed)."""

    def __init__(self, allowed: frozenset[str]) -> None:
        self.allowed = allowed
        self.counts: Counter[str] = Counter()
        self.bad: Counter[str] = Counter()
        self.examples: dict[str, list[Anomaly]] = defaultdict(list)

    def add(self, kind: str, make: Callable[[], tuple[str, list[dict]]], *,
            allowed: bool = False) -> None:
        allowed = allowed or kind in self.allowed
        self.counts[kind] += 1
        if not allowed:
            self.bad[kind] += 1
        examples = self.examples[kind]
        if len(examples) < MAX_EXAMPLES:
            examples.append(Anomaly(kind, *make(), allowed=allowed))
        elif not allowed:  # a bad case displaces an allowed example
            for i, a in enumerate(examples):
                if a.allowed:
                    examples[i] = Anomaly(kind, *make(), allowed=False)
                    break


# --------------------------------------------------------------------------- version orders

@dataclass
class VersionOrder:
    """One key's log: Kafka offsets, and dense indices (offsets with a known value)."""
    offsets: list[int]                  # index -> offset
    by_index: list[Any]                 # index -> a value (the first seen at that offset)
    by_value: dict[Any, int]            # value -> index (the last one, as Jepsen's)
    first_index: dict[Any, int]         # value -> earliest index it appeared at
    at_offset: dict[int, list]          # offset -> the values seen there (mostly one)


class _Analysis:
    def __init__(self, history: list[Op], isolation: str) -> None:
        self.isolation = isolation
        self.ops: list[Op] = []                   # completions of txn/send/poll, in order
        self.invoke_of: dict[int, Op] = {}        # completion index -> its invocation
        self.by_process: dict[Any, list[Op]] = defaultdict(list)
        self.reads: dict[int, dict[str, list]] = {}
        self.writes: dict[int, dict[str, list]] = {}
        self.final_reads: list[Op] = []
        self.copies: list[dict] = []
        self.committed_offsets: dict[str, dict[str, int]] = {}
        self.subscribers: set = set()
        self._parse(history)
        self.readers = [op for op in self.ops if op.index in self.reads] + self.final_reads
        self._index_values()
        self.version_orders = self._version_orders()

    def _parse(self, history: list[Op]) -> None:
        pending: dict[Any, Op] = {}
        for op in sorted(history, key=lambda o: o.index):
            if op.f == "final-read":
                self.final_reads.append(op)
                self.reads[op.index] = op.value or {}
            elif op.f == "copy" and op.type == OK:
                self.copies.append(op.value)
            elif op.f == "committed-offsets" and op.type == OK:
                v = op.value or {}
                self.committed_offsets.setdefault(v.get("group"), {}).update(v.get("offsets") or {})
            elif op.f in CLIENT_FS or op.f in ("assign", "subscribe"):
                if op.type == INVOKE:
                    pending[op.process] = op
                    continue
                inv = pending.pop(op.process, None)
                if inv is not None:
                    self.invoke_of[op.index] = inv
                self.by_process[op.process].append(op)
                if op.f == "subscribe" and op.type == OK:
                    self.subscribers.add(op.process)
                if op.f in CLIENT_FS:
                    self.ops.append(op)
                    reads, writes = op_reads(op), op_writes(op)
                    if reads:
                        self.reads[op.index] = reads
                    if writes:
                        self.writes[op.index] = writes

    def _index_values(self) -> None:
        # key -> value -> the op that read it first; key -> values whose commit a read proves
        self.read_by: dict[str, dict[Any, Op]] = defaultdict(dict)
        self.proof: dict[str, set] = defaultdict(set)
        for op in self.readers:
            # at read_uncommitted (the final read too, as the runner does it) a read proves nothing
            proves = op.type == OK and self.isolation != READ_UNCOMMITTED
            for k, pairs in self.reads[op.index].items():
                seen, proof = self.read_by[k], self.proof[k]
                for p in pairs:
                    v = p[1]
                    if v not in seen:
                        seen[v] = op
                    if proves:
                        proof.add(v)
        # key -> value -> the write of it most likely to have happened (ok > info > fail)
        self.writer_of: dict[str, dict[Any, Op]] = defaultdict(dict)
        for op in self.ops:
            for k, pairs in self.writes.get(op.index, {}).items():
                w = self.writer_of[k]
                for _, v in pairs:
                    prev = w.get(v)
                    if prev is None or _TYPE_RANK.get(op.type, -1) > _TYPE_RANK.get(prev.type, -1):
                        w[v] = op

    def must_have_committed(self, op: Op) -> bool:
        """Jepsen's: ok, or info with one of its sends read (by a reader that proves it)."""
        if op.type == OK:
            return True
        if op.type != INFO:
            return False
        return any(v in self.proof.get(k, ()) for k, pairs in self.writes.get(op.index, {}).items()
                   for _, v in pairs)

    def _version_orders(self) -> dict[str, VersionOrder]:
        logs: dict[str, dict[int, list]] = defaultdict(dict)

        def note(k: str, offset: int | None, v: Any) -> None:
            if offset is None:
                return
            vs = logs[k].get(offset)
            if vs is None:
                logs[k][offset] = [v]
            elif v not in vs:
                vs.append(v)

        for op in self.ops:
            if op.index in self.writes and self.must_have_committed(op):
                for k, pairs in self.writes[op.index].items():
                    for offset, v in pairs:
                        note(k, offset, v)
        for op in self.readers:  # every poll, of any type: pollers must emit safe data
            for k, pairs in self.reads[op.index].items():
                for p in pairs:
                    note(k, p[0], p[1])
        orders = {}
        for k, log in logs.items():
            offsets = sorted(log)
            by_value: dict[Any, int] = {}
            first_index: dict[Any, int] = {}
            for i, o in enumerate(offsets):
                for v in log[o]:
                    by_value[v] = i
                    first_index.setdefault(v, i)
            orders[k] = VersionOrder(offsets, [log[o][0] for o in offsets], by_value, first_index, log)
        return orders


# --------------------------------------------------------------------------- per-value checks

def _inconsistent_offsets(a: _Analysis, found: _Findings) -> None:
    for k, vo in a.version_orders.items():
        for offset, vs in vo.at_offset.items():
            if len(vs) > 1:
                def make(k=k, offset=offset, vs=vs):
                    ops = [o for o in (a.read_by[k].get(v) or a.writer_of[k].get(v) for v in vs) if o]
                    return (f"{k} offset {offset} holds different values {sorted(vs, key=repr)}",
                            [_op_dict(o, {k: vs}) for o in ops[:4]])
                found.add("inconsistent-offsets", make)


def _duplicates(a: _Analysis, found: _Findings) -> set[tuple[str, Any]]:
    dups = set()
    for k, vo in a.version_orders.items():
        for v, first in vo.first_index.items():
            if vo.by_value[v] == first:  # seen at one offset only
                continue
            dups.add((k, v))

            def make(k=k, v=v, vo=vo):
                offsets = [o for o in vo.offsets if v in vo.at_offset[o]]
                ops = [o for o in (a.writer_of[k].get(v), a.read_by[k].get(v)) if o]
                return (f"{k} value {v!r} appears at {len(offsets)} offsets {offsets[:8]}",
                        [_op_dict(o, {k: [v]}) for o in ops])
            found.add("duplicate", make)
    return dups


def _lost_writes(a: _Analysis, found: _Findings) -> set[tuple[str, Any]]:
    """Jepsen's: below the highest index read, every value whose last appearance is there
    must have been read, if its writer must have committed."""
    lost_set = set()
    for k, seen in a.read_by.items():
        vo = a.version_orders.get(k)
        if vo is None:
            continue
        bound = max((vo.first_index[v] for v in seen if v in vo.first_index), default=-1)
        if bound < 0:
            continue
        max_value = vo.by_index[bound]
        last_index: dict[Any, int] = {}
        for i, offset in enumerate(vo.offsets[:bound + 1]):
            for v in vo.at_offset[offset]:
                last_index[v] = i
        for v, i in last_index.items():
            if v in seen or (vo.by_value.get(v, i) > bound):
                continue
            writer = a.writer_of[k].get(v)
            if writer is None or not a.must_have_committed(writer):
                continue
            lost_set.add((k, v))

            def make(k=k, v=v, i=i, writer=writer, bound=bound, max_value=max_value, vo=vo):
                reader = a.read_by[k].get(max_value)
                return (f"{k} value {v!r} at offset {vo.offsets[i]} (sent by an {writer.type} "
                        f"{writer.f}) was never read, though offset {vo.offsets[bound]} "
                        f"(value {max_value!r}) was",
                        [_op_dict(o, {k: [v, max_value]}) for o in (writer, reader) if o])
            found.add("lost-write", make)
    return lost_set


def _tail_losses(a: _Analysis, found: _Findings, lost: set) -> None:
    """Writes that must have committed and are missing from a complete final read of their key
    (the tail of a key, which Jepsen's lost-write cannot see)."""
    complete: dict[str, Op] = {}
    for op in a.final_reads:
        incomplete = set(op.extra.get("incomplete") or ())
        for k in a.reads[op.index]:
            if k not in incomplete:
                complete[k] = op
    for k, final in complete.items():
        in_final = {p[1] for p in a.reads[final.index][k]}
        for v, writer in a.writer_of.get(k, {}).items():
            if v in in_final or (k, v) in lost or not a.must_have_committed(writer):
                continue
            lost.add((k, v))

            def make(k=k, v=v, writer=writer, final=final):
                return (f"{k} value {v!r} (sent by an {writer.type} {writer.f}) is not in the complete "
                        f"final read of {k}", [_op_dict(writer, {k: [v]}), _op_dict(final, {k: [v]})])
            found.add("lost-write", make)


def _reads_checks(a: _Analysis, found: _Findings) -> None:
    """G1a and precommitted-read: one pass over every value read."""
    final = {op.index for op in a.final_reads}
    for op in a.readers:
        own = a.writes.get(op.index, {})
        for k, pairs in a.reads[op.index].items():
            writers = a.writer_of.get(k, {})
            own_k = {v for _, v in own.get(k, ())}
            for p in pairs:
                v = p[1]
                w = writers.get(v)
                if w is None:
                    continue
                # (a transaction reading its own send is a precommitted-read, below, not G1a)
                if w.type == FAIL and w is not op and _read_of_write(a, w, k, p):
                    def make(k=k, v=v, w=w, op=op):
                        return (f"{k} value {v!r} was read by {op.f} (process {op.process}) but "
                                f"every write of it failed",
                                [_op_dict(w, {k: [v]}), _op_dict(op, {k: [v]})])
                    found.add("G1a", make)
                if v in own_k:
                    def make(k=k, v=v, op=op):
                        return (f"{op.f} (process {op.process}) polled {k} value {v!r} that it "
                                f"sent itself, before committing", [_op_dict(op, {k: [v]})])
                    found.add("precommitted-read", make)
                elif op.index not in final and w is not op:
                    inv = a.invoke_of.get(w.index)
                    if inv is not None and inv.index > op.index:
                        def make(k=k, v=v, op=op, w=w, inv=inv):
                            return (f"{k} value {v!r} was read by op {op.index} before its writer "
                                    f"was invoked (op {inv.index})",
                                    [_op_dict(op, {k: [v]}), _op_dict(inv), _op_dict(w, {k: [v]})])
                        found.add("precommitted-read", make)


def _read_of_write(a: _Analysis, w: Op, k: str, read: list) -> bool:
    """Whether the (offset, value) read can be the one ``w`` wrote: not when ``w`` learnt
    another offset for the value (a copier re-sends values, and a killed client's send of the
    same value may have left no offset behind)."""
    offsets = {o for o, v in a.writes.get(w.index, {}).get(k, ()) if v == read[1]}
    return None in offsets or read[0] is None or read[0] in offsets


def _unseen(a: _Analysis) -> dict:
    by_key: Counter[str] = Counter()
    sample = []
    for k, writers in a.writer_of.items():
        seen = a.read_by.get(k, {})
        for v, w in writers.items():
            if w.type == OK and v not in seen:
                by_key[k] += 1
                if len(sample) < 20:
                    sample.append([k, v])
    return {"count": sum(by_key.values()), "by-key": dict(by_key.most_common(20)), "sample": sample}


# --------------------------------------------------------------------------- order checks

def _skipped(vo: VersionOrder, i1: int, i2: int) -> str:
    vals = vo.by_index[i1 + 1:i2]
    return f"{vals[:8]!r}{' ...' if len(vals) > 8 else ''}"


def _internal_orders(a: _Analysis, found: _Findings) -> None:
    """int-poll-skip, int-nonmonotonic-poll, int-send-skip, int-nonmonotonic-send."""
    for op in a.ops:
        for what, pairs_by_key in (("poll", a.reads.get(op.index)), ("send", a.writes.get(op.index))):
            for k, pairs in (pairs_by_key or {}).items():
                vo = a.version_orders.get(k)
                if vo is None:
                    continue
                bv = vo.by_value
                i1 = v1 = None
                for p in pairs:
                    v2 = p[1]
                    i2 = bv.get(v2)
                    if i1 is not None and i2 is not None and i2 != i1 + 1:
                        _internal_case(found, what, op, k, vo, v1, v2, i1, i2)
                    i1, v1 = i2, v2


def _internal_case(found: _Findings, what: str, op: Op, k: str, vo: VersionOrder, v1: Any, v2: Any,
                   i1: int, i2: int) -> None:
    delta = i2 - i1
    kind = f"int-{what}-skip" if delta > 1 else f"int-nonmonotonic-{what}"

    def make():
        extra = f", skipping {_skipped(vo, i1, i2)}" if delta > 1 else ""
        return (f"one {op.f} (process {op.process}) {what}s {k} value {v1!r} then "
                f"{v2!r}: index delta {delta}{extra}", [_op_dict(op, {k: [v1, v2]})])
    found.add(kind, make)


def _process_orders(a: _Analysis, found: _Findings, subscribers: set) -> None:
    """poll-skip / nonmonotonic-poll and nonmonotonic-send, per process (Jepsen's): the first
    value an op polls (sends) of a key against the last one the process's previous ok op did."""
    orders = a.version_orders
    for process, ops in a.by_process.items():
        last_reads: dict[str, tuple[Op, Any]] = {}  # key -> (op, last value it read)
        last_sends: dict[str, tuple[Op, Any]] = {}
        subscriber = process in subscribers
        for op in ops:
            if op.f in ("assign", "subscribe"):
                if op.type == OK:  # keep only positions in what it now consumes
                    keys = set(op.value or ())
                    last_reads = {k: x for k, x in last_reads.items() if k in keys}
                    last_sends = {k: x for k, x in last_sends.items() if k in keys}
                continue
            for k, pairs in a.reads.get(op.index, {}).items():
                if not pairs:
                    continue
                prev = last_reads.get(k)
                if prev is not None and k in orders:
                    bv = orders[k].by_value
                    i1, i2 = bv.get(prev[1]), bv.get(pairs[0][1])
                    if i1 is not None and i2 is not None and i2 != i1 + 1:
                        _order_case(found, "poll", k, orders[k], prev, op, pairs[0][1], i1, i2,
                                    allowed=subscriber)
                if op.type == OK:
                    last_reads[k] = (op, pairs[-1][1])
            if op.type in (OK, INFO):
                for k, pairs in a.writes.get(op.index, {}).items():
                    prev = last_sends.get(k)
                    if prev is not None and k in orders:
                        bv = orders[k].by_value
                        i1, i2 = bv.get(prev[1]), bv.get(pairs[0][1])
                        if i1 is not None and i2 is not None and i2 <= i1:  # sends may skip
                            _order_case(found, "send", k, orders[k], prev, op, pairs[0][1], i1, i2)
                    last_sends[k] = (op, pairs[-1][1])


def _order_case(found: _Findings, what: str, k: str, vo: VersionOrder, prev: tuple[Op, Any], op: Op,
                v2: Any, i1: int, i2: int, *, allowed: bool = False) -> None:
    delta = i2 - i1
    kind = f"{what}-skip" if delta > 1 else f"nonmonotonic-{what}"
    prev_op, v1 = prev

    def make():
        extra = f", skipping {_skipped(vo, i1, i2)}" if delta > 1 else ""
        return (f"process {op.process} {what}s {k}: {v1!r} last in op {prev_op.index}, then {v2!r} "
                f"first in op {op.index}: index delta {delta}{extra}",
                [_op_dict(prev_op, {k: [v1]}), _op_dict(op, {k: [v2]})])
    found.add(kind, make, allowed=allowed and kind in SUBSCRIBE_ALLOWED)


# --------------------------------------------------------------------------- copier

def _copier(a: _Analysis, found: _Findings, lost: set, dups: set) -> dict:
    """Every input value below the group's committed offset is in the output once, in order."""
    final: dict[str, list] = {}
    for op in a.final_reads:
        final.update(op.value or {})
    final_op = a.final_reads[-1] if a.final_reads else None
    incomplete = {k for op in a.final_reads for k in op.extra.get("incomplete") or ()}
    stats = {"pairs": 0, "checked-values": 0, "groups": sorted(str(g) for g in a.committed_offsets),
             "unchecked-pairs": []}
    for copy in a.copies:
        committed = a.committed_offsets.get(copy.get("group"), {})
        for in_k, out_k in (copy.get("pairs") or {}).items():
            stats["pairs"] += 1
            # an output the final read could not finish would show false losses
            if in_k not in final or out_k not in final or in_k not in committed or out_k in incomplete:
                stats["unchecked-pairs"].append([in_k, out_k])
                continue
            out_count = Counter(p[1] for p in final[out_k])
            upto = committed[in_k]
            in_offset = {}
            last_copied = None  # shown with a missing value: where in the output it belonged
            for offset, v in final[in_k]:
                in_offset.setdefault(v, offset)
                if offset >= upto:
                    continue
                stats["checked-values"] += 1
                n = out_count.get(v, 0)
                if n:
                    last_copied = v
                if n == 0 and (out_k, v) not in lost:
                    def make(in_k=in_k, out_k=out_k, offset=offset, v=v, upto=upto, near=last_copied):
                        # the final read, and the copier txns that polled or sent the value
                        others = {o.index: o for o in (a.read_by[in_k].get(v), a.writer_of[out_k].get(v))
                                  if o is not None and o is not final_op}
                        ops = [_op_dict(final_op, {in_k: [v], out_k: [near]})]
                        ops += [_op_dict(o, {in_k: [v], out_k: [v]}) for o in others.values()]
                        return (f"copied input {in_k} offset {offset} value {v!r}: its offset was "
                                f"committed (group at {upto}) but the value is missing from output "
                                f"{out_k}", ops)
                    found.add("lost-write", make)
                elif n > 1 and (out_k, v) not in dups:
                    def make(in_k=in_k, out_k=out_k, offset=offset, v=v, n=n):
                        return (f"copied input {in_k} offset {offset} value {v!r} is in output "
                                f"{out_k} {n} times", [_op_dict(final_op, {out_k: [v]})])
                    found.add("duplicate", make)
            _copier_order(found, final_op, in_k, out_k, final[out_k], in_offset)
    return stats


def _copier_order(found: _Findings, final_op: Op, in_k: str, out_k: str, out_pairs: list,
                  in_offset: dict) -> None:
    seen, prev = set(), None
    for out_off, v in out_pairs:
        if v not in in_offset or v in seen:
            continue
        seen.add(v)
        if prev is not None and in_offset[v] < in_offset[prev[1]]:
            def make(p=prev, out_off=out_off, v=v):
                return (f"output {out_k} has {p[1]!r} (input {in_k} offset {in_offset[p[1]]}) at "
                        f"offset {p[0]} before {v!r} (input offset {in_offset[v]}) at {out_off}",
                        [_op_dict(final_op, {out_k: [p[1], v], in_k: [p[1], v]})])
            found.add("nonmonotonic-send", make)
        prev = (out_off, v)


# --------------------------------------------------------------------------- cycles

class _Graph:
    """Dependency edges between ok transactions (op indices), one adjacency map per kind.
    Why an edge exists is worked out again only for the cycles reported (see :meth:`why`)."""

    def __init__(self, a: _Analysis) -> None:
        self.a = a
        self.ops = {op.index: op for op in a.ops if op.type == OK}
        self.adj: dict[str, dict[int, set[int]]] = {k: defaultdict(set) for k in (WW, WR, RW, PROCESS)}
        self._build()

    def _build(self) -> None:
        a, nodes = self.a, self.ops
        ww, wr, rw = self.adj[WW], self.adj[WR], self.adj[RW]
        ok_writer = {k: {v: w.index for v, w in ws.items() if w.index in nodes}
                     for k, ws in a.writer_of.items()}
        for k, vo in a.version_orders.items():
            writers = ok_writer.get(k, {})
            for v1, v2 in zip(vo.by_index, vo.by_index[1:]):
                w1, w2 = writers.get(v1), writers.get(v2)
                if w1 is not None and w2 is not None and w1 != w2:
                    ww[w1].add(w2)
        for r in nodes:
            reads = a.reads.get(r)
            if not reads:
                continue
            for k, pairs in reads.items():
                writers = ok_writer.get(k, {})
                for w in {writers.get(p[1]) for p in pairs}:
                    if w is not None and w != r:
                        wr[w].add(r)
                vo = a.version_orders.get(k)
                if vo is None:
                    continue
                bv = vo.by_value
                top = max((bv.get(p[1], -1) for p in pairs), default=-1)
                if 0 <= top < len(vo.by_index) - 1:  # rw: r missed the next value
                    w = writers.get(vo.by_index[top + 1])
                    if w is not None and w != r:
                        rw[r].add(w)
        for ops in a.by_process.values():
            txns = [op.index for op in ops if op.index in nodes]
            for o1, o2 in zip(txns, txns[1:]):
                self.adj[PROCESS][o1].add(o2)

    def why(self, u: int, v: int, kind: str) -> str:
        a = self.a
        if kind == PROCESS:
            return f"process {self.ops[u].process}, later"
        if kind == WR:
            for k, pairs in a.reads.get(v, {}).items():
                for p in pairs:
                    w = a.writer_of.get(k, {}).get(p[1])
                    if w is not None and w.index == u:
                        return f"{k}: {p[1]!r} polled"
        if kind in (WW, RW):
            src = u if kind == WW else v
            for k, pairs in a.writes.get(src, {}).items():
                vo = a.version_orders.get(k)
                for _, val in pairs:
                    i = vo.by_value.get(val) if vo else None
                    if i is None or i + 1 >= len(vo.by_index):
                        continue
                    nxt = a.writer_of.get(k, {}).get(vo.by_index[i + 1])
                    if kind == WW and nxt is not None and nxt.index == v:
                        return f"{k}: {val!r} sent before {vo.by_index[i + 1]!r}"
            if kind == RW:
                for k, pairs in a.reads.get(u, {}).items():
                    vo = a.version_orders.get(k)
                    top = max((vo.by_value.get(p[1], -1) for p in pairs), default=-1) if vo else -1
                    if 0 <= top < len(vo.by_index) - 1:
                        w = a.writer_of.get(k, {}).get(vo.by_index[top + 1])
                        if w is not None and w.index == v:
                            return f"{k}: polled up to {vo.by_index[top]!r}, missed {vo.by_index[top + 1]!r}"
        return ""

    def edge_count(self) -> dict[str, int]:
        return {k: sum(len(s) for s in adj.values()) for k, adj in self.adj.items()}


def _sccs(adjs: list[dict[int, set[int]]]) -> list[list[int]]:
    """Tarjan's strongly connected components (iterative), only those of two or more nodes."""
    if len(adjs) == 1:
        succs: dict[int, Any] = adjs[0]
    else:
        succs = defaultdict(set)
        for adj in adjs:
            for n, s in adj.items():
                succs[n] |= s
    empty: tuple = ()

    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    comps: list[list[int]] = []
    for root in list(succs):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succs.get(root, empty)))]
        while work:
            v, it = work[-1]
            descended = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succs.get(w, empty))))
                    descended = True
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            if descended:
                continue
            work.pop()
            if work and low[v] < low[work[-1][0]]:
                low[work[-1][0]] = low[v]
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    return comps


def _path(src: int, dst: int, members: set[int], adjs: list[dict[int, set[int]]]) -> list[int] | None:
    """Shortest path src -> dst inside members, breadth first."""
    prev: dict[int, int | None] = {src: None}
    queue = deque([src])
    while queue:
        n = queue.popleft()
        for adj in adjs:
            for m in adj.get(n, ()):
                if m in members and m not in prev:
                    prev[m] = n
                    if m == dst:
                        path = [m]
                        while prev[path[-1]] is not None:
                            path.append(prev[path[-1]])
                        return path[::-1]
                    queue.append(m)
    return None


# (edge kinds searched, the kind each cycle must contain)
# The first two can find bad cycles (wr alone, with process order), so they run first: the time
# budget only ever cuts the informational ones.
CYCLE_SEARCHES = (
    ((WR,), WR),
    ((WR, PROCESS), PROCESS),
    ((WW,), WW),
    ((WW, WR), WR),
    ((WW, WR, RW), RW),
)


def _cycle_kind(labels: list[str]) -> str:
    c = Counter(labels)
    base = "G-single" if c[RW] == 1 else "G2" if c[RW] else "G1c" if c[WR] else "G0"
    return base + ("-process" if c[PROCESS] else "")


def _cycles(a: _Analysis, found: _Findings, deadline: float) -> dict:
    g = _Graph(a)
    stats: dict[str, Any] = {"nodes": len(g.ops), "edges": g.edge_count(), "truncated": False,
                             "max-cycles-per-search": MAX_CYCLES_PER_SEARCH}
    reported: set[frozenset[int]] = set()
    for kinds, required in CYCLE_SEARCHES:
        adjs = [g.adj[k] for k in kinds]
        n_found = 0
        for comp in sorted(_sccs(adjs), key=len):
            if n_found >= MAX_CYCLES_PER_SEARCH:
                break
            if time.monotonic() > deadline:
                stats["truncated"] = True
                break
            members = set(comp)
            cycle = _cycle_in(comp, members, g.adj[required], adjs)
            if cycle is None or frozenset(cycle) in reported:
                continue
            reported.add(frozenset(cycle))
            n_found += 1
            _report_cycle(g, found, cycle, kinds, required)
        if stats["truncated"]:
            break
    return stats


def _cycle_in(comp: list[int], members: set[int], req: dict[int, set[int]],
              adjs: list[dict[int, set[int]]]) -> list[int] | None:
    """The shortest cycle through the first required edge inside the SCC (an edge inside an
    SCC always closes a cycle), as nodes u, v, ..., u."""
    for u in comp:
        for v in req.get(u, ()):
            if v in members:
                path = _path(v, u, members, adjs)
                return None if path is None else [u, *path]
    return None


def _report_cycle(g: _Graph, found: _Findings, cycle: list[int], kinds: tuple, required: str) -> None:
    labels = [required]  # the first edge is the required one
    for u, v in zip(cycle[1:], cycle[2:]):
        labels.append(next(k for k in EDGE_PREFERENCE if k in kinds and v in g.adj[k].get(u, ())))
    kind = _cycle_kind(labels)
    # A G1c through a ww edge is Kafka's normal interleaving of unisolated writes.
    allowed = kind.startswith("G1c") and WW in labels

    def make():
        steps = []
        for (u, v), label in zip(zip(cycle, cycle[1:]), labels):
            why = g.why(u, v, label)
            steps.append(f"op {u} -{label}-> op {v}" + (f" ({why})" if why else ""))
        return (f"cycle of {len(labels)} edges: " + "; ".join(steps),
                [_op_dict(g.ops[n]) for n in cycle[:-1][:6]])
    found.add(kind, make, allowed=allowed)


# --------------------------------------------------------------------------- check

def check(history: list[Op], *, isolation: str = READ_COMMITTED, subscribe_processes: set = frozenset(),
          allowed: set[str] | None = None) -> Result:
    """Analyse a history; ``valid`` is false iff a kind not allowed was found.

    ``allowed`` replaces the kind-level allowed set (default :data:`DEFAULT_ALLOWED`); the
    per-case allowances (subscribers' poll-skip/nonmonotonic-poll, G1c through ww) always apply.
    """
    started = time.monotonic()
    a = _Analysis(history, isolation)
    found = _Findings(frozenset(DEFAULT_ALLOWED if allowed is None else allowed))
    subscribers = set(subscribe_processes) | a.subscribers
    _inconsistent_offsets(a, found)
    dups = _duplicates(a, found)
    lost = _lost_writes(a, found)
    _tail_losses(a, found, lost)
    _reads_checks(a, found)
    _internal_orders(a, found)
    _process_orders(a, found, subscribers)
    copier = _copier(a, found, lost, dups) if a.copies else None
    graph = _cycles(a, found, time.monotonic() + CYCLE_BUDGET_S)
    stats = _stats(history, a, subscribers)
    stats.update(unseen=_unseen(a), graph=graph, elapsed_s=round(time.monotonic() - started, 3))
    if copier is not None:
        stats["copier"] = copier
    bad = sorted(found.bad, key=_kind_rank)
    kinds = sorted(found.counts, key=_kind_rank)
    return Result(valid=not bad, counts={k: found.counts[k] for k in kinds},
                  anomalies={k: found.examples[k] for k in kinds}, stats=stats, bad_error_types=bad)


def _stats(history: list[Op], a: _Analysis, subscribers: set) -> dict:
    types = Counter(op.type for op in a.ops)
    by_f: dict[str, Counter] = defaultdict(Counter)
    for op in a.ops:
        by_f[op.f][op.type] += 1
    written = Counter()
    for op in a.ops:
        written[op.type] += sum(len(p) for p in a.writes.get(op.index, {}).values())
    return {
        "isolation": a.isolation,
        "history-ops": len(history),
        "ops": {t: types.get(t, 0) for t in (OK, INFO, FAIL)},
        "by-f": {f: dict(c) for f, c in by_f.items()},
        "processes": len(a.by_process),
        "subscribers": sorted(map(str, subscribers)),
        "keys": len(set(a.version_orders) | set(a.writer_of)),
        "values-written": {t: written.get(t, 0) for t in (OK, INFO, FAIL)},
        "values-read": sum(len(vs) for vs in a.read_by.values()),
        "final-read": bool(a.final_reads),
        "final-read-incomplete": sorted({k for op in a.final_reads for k in op.extra.get("incomplete") or ()}),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.verify.checker", description=__doc__.split("\n")[0])
    p.add_argument("history")
    p.add_argument("--isolation", default=READ_COMMITTED, choices=(READ_COMMITTED, READ_UNCOMMITTED))
    p.add_argument("--subscribe-process", action="append", default=[],
                   help="a process whose polls come from a subscription (repeatable)")
    args = p.parse_args(argv)
    subs = {int(x) if x.lstrip("-").isdigit() else x for x in args.subscribe_process}
    result = check(read_history(args.history), isolation=args.isolation, subscribe_processes=subs)
    print(result.verdict_line())
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
