"""The history a verification run records, after Jepsen's (one operation a line, as JSON).

Owns the record format that the workloads write and the checker reads; nothing here talks to
a broker.

Every operation is recorded twice: when it is invoked and when it completes. The completion
has the same ``process`` and ``f`` and a ``type`` of

- ``ok``: it certainly happened (a send acknowledged, a transaction whose commit returned),
- ``fail``: it certainly did not (a transaction aborted on purpose, or one the client saw
  abort before any of its effects could be visible),
- ``info``: indeterminate (the client crashed, was killed or timed out mid-operation; its
  effects may or may not be visible).

A process is one client incarnation: a killed client's replacement gets a new process number,
as in Jepsen, so a process's operations never overlap.

Client operations (``f`` of ``txn``, ``send`` or ``poll``) carry a list of micro-operations:

- ``["send", key, value]`` when invoked; ``["send", key, [offset, value]]`` once completed
  (``offset`` is ``None`` where the client did not learn it);
- ``["poll", None]`` when invoked; ``["poll", {key: [[offset, value], ...]}]`` once completed,
  the records in the order the consumer returned them.

A key is a partition, written ``"topic/partition"``; values are integers, unique per key.
A copier's transaction polls an input key and sends what it read to an output key with the
same value, so its ``txn`` completion holds both. A ``send`` or ``poll`` ``f`` is a
non-transactional single operation (the same micro-operation shape).

Other operations:

- ``f="assign"`` / ``f="subscribe"``: a consumer's partitions (``value`` a list of keys);
- ``f="final-read"`` (``ok`` only, process ``"checker"``): after the run, a read_committed
  read of every key from its start to its end, ``value`` ``{key: [[offset, value], ...]}``;
- ``f="committed-offsets"`` (``ok`` only, process ``"checker"``): a consumer group's committed
  offsets after the run, ``value`` ``{"group": name, "offsets": {key: offset}}``;
- ``f="copy"`` (``ok`` only, process ``"checker"``): which input key a copier workload copies
  to which output key, ``value`` ``{"group": name, "pairs": {input_key: output_key}}``;
- nemesis operations (process ``"nemesis"``): ``f`` is the fault (``kill9``, ``pause``,
  ``partition``, ...), ``type`` ``info``, ``value`` what it did (``{"phase": "start", ...}``
  then ``{"phase": "stop", ...}``).

``time`` is seconds since the run began (monotonic clock), ``index`` the line number.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
CLIENT_FS = frozenset({"txn", "send", "poll"})


def key_of(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


@dataclass(slots=True)
class Op:
    index: int
    time: float
    process: int | str
    type: str
    f: str
    value: Any = None
    error: str | None = None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        if not d["extra"]:
            del d["extra"]
        if d["error"] is None:
            del d["error"]
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> Op:
        return cls(index=d["index"], time=d["time"], process=d["process"], type=d["type"], f=d["f"],
                   value=d.get("value"), error=d.get("error"), extra=d.get("extra") or {})


class HistoryWriter:
    """Appends operations to a JSON-lines file from any thread (clients run in threads or in
    subprocesses that send their operations to the runner); ``index`` and ``time`` are
    assigned here, in the order operations arrive."""

    def __init__(self, path: str, started: float | None = None) -> None:
        self.path = path
        self.started = time.monotonic() if started is None else started
        self._lock = threading.Lock()
        self._next = 0
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def record(self, process: int | str, type_: str, f: str, value: Any = None, *,
               error: str | None = None, **extra: Any) -> Op:
        with self._lock:
            op = Op(self._next, round(time.monotonic() - self.started, 6), process, type_, f, value,
                    error, extra)
            self._next += 1
            self._file.write(op.to_json() + "\n")
            self._file.flush()
        return op

    def close(self) -> None:
        with self._lock:
            self._file.close()


def completion_key(op: Op) -> Any:
    """What pairs a completion with its invoke: the process (its operations never overlap),
    and for a single ``send`` its value too (a loader keeps many sends in flight)."""
    if op.f == "send" and op.value and isinstance(op.value[0], list) and len(op.value[0]) == 3:
        v = op.value[0][2]
        return (op.process, v[1] if isinstance(v, list) else v)
    return op.process


def unfinished(ops: Iterable[Op]) -> list[Op]:
    """Invokes without a completion (their client was killed mid-operation), in order."""
    open_: dict[Any, Op] = {}
    for op in ops:
        if op.f not in CLIENT_FS:
            continue
        if op.type == INVOKE:
            open_[completion_key(op)] = op
        else:
            open_.pop(completion_key(op), None)
    return sorted(open_.values(), key=lambda op: op.index)


def read_history(path: str) -> list[Op]:
    with open(path, encoding="utf-8") as f:
        return list(parse_history(f))


def parse_history(lines: Iterable[str]) -> Iterator[Op]:
    for line in lines:
        line = line.strip()
        if line:
            yield Op.from_dict(json.loads(line))
