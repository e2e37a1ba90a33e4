"""One verification run: target up, topics, clients, faults, final reads, verdict.

Owns the run's life cycle and the client processes: it starts the target (unless external),
creates the topics (RF 3, 6 partitions, min.insync.replicas=2), starts the workload's clients
(:mod:`.workloads`, one OS process per incarnation), runs the nemesis schedule, stops everything
it started (by pid, also on Ctrl-C and errors), heals every fault, waits for health, reads every
key back (``final-read``), merges the clients' history files by time into ``history.jsonl``,
runs the checker and writes ``result.json`` and ``report.html``. The ``client-kill`` fault is
here: kill -9 a random client and start its replacement (a new process number; a copier keeps
its transactional.id).

Where it knowingly differs from Jepsen: the schedule is one random fault per ``--interval``
(held a few seconds, then undone) plus, when ``client-kill`` is listed, a client kill in the
same tick (issue 18's scenario), instead of Jepsen's generator mix; the copier's input is
loaded while it copies, and after ``--seconds`` of faults the copiers get a bounded time without
faults to catch up (Jepsen's final generator); the final read is by assign + offsets.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import structlog

from tools.verify.history import INFO, INVOKE, OK, HistoryWriter, Op, key_of, parse_history, unfinished

log = structlog.get_logger("verify.runner")

PARTITIONS, REPLICATION, MIN_ISR = 6, 3, 2
CLIENT_FAULT = "client-kill"
STOP_GRACE_S = 20.0
MAX_RESPAWNS = 50
DRAIN_S = 180.0      # how long copiers may catch up once the faults are over
LOAD_SHARE = 0.8     # the copier's input is loaded over this share of --seconds


@dataclasses.dataclass
class Options:
    target: str = "devcluster"
    workload: str = "txn"
    nemesis: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 60.0
    isolation: str = "read_committed"
    records: int = 20000
    interval: float = 15.0
    hold: float = 6.0
    seed: int = 0
    out: str = ""
    no_idempotence: bool = False
    producers: int = 3
    consumers: int = 2
    copiers: int = 3
    max_txn_length: int = 30
    client_debug: str = ""

    def params(self) -> dict:
        return dataclasses.asdict(self)


# --- client processes -----------------------------------------------------------------------------

@dataclasses.dataclass
class Client:
    slot: str
    spec: dict
    popen: subprocess.Popen

    @property
    def process(self) -> int:
        return self.spec["process"]

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


class Clients:
    """The client incarnations: started, replaced and stopped by pid."""

    def __init__(self, history_dir: Path, started: float) -> None:
        self.dir = history_dir
        self.started = started
        self.next_process = 0
        self.live: dict[str, Client] = {}   # slot -> current incarnation
        self.all: list[Client] = []
        self.respawns = 0
        self.ended: dict[int, float] = {}   # process -> when the runner saw it end (run time)

    def _ended(self, client: Client) -> None:
        self.ended.setdefault(client.process, round(time.monotonic() - self.started, 6))

    def start(self, slot: str, spec: dict) -> Client:
        spec = {**spec, "process": self.next_process, "started": self.started,
                "history": str(self.dir / f"p{self.next_process}.jsonl")}
        self.next_process += 1
        with open(self.dir / f"p{spec['process']}.log", "w") as out:
            popen = subprocess.Popen([sys.executable, "-m", "tools.verify.workloads", json.dumps(spec)],
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=str(Path(__file__).resolve().parents[2]))
        client = Client(slot, spec, popen)
        self.live[slot] = client
        self.all.append(client)
        log.debug("client started", slot=slot, process=client.process, role=spec["role"], pid=popen.pid)
        return client

    def replace(self, client: Client) -> Client:
        """A new incarnation (new process number) of ``client``'s slot."""
        spec = {k: v for k, v in client.spec.items() if k not in ("process", "history")}
        return self.start(client.slot, spec)

    def kill9(self, client: Client) -> None:
        if client.alive:
            client.popen.kill()
        client.popen.wait()
        self._ended(client)

    def respawn_dead(self) -> list[Client]:
        """Clients that exited on their own with an error (a crash) get a new incarnation
        (bounded); one that exited 0 has finished its work (the loader) and leaves."""
        out = []
        for client in list(self.live.values()):
            if not client.alive and client.popen.returncode == 0:
                self._ended(client)
                del self.live[client.slot]
                log.info("client finished", slot=client.slot, process=client.process)
            elif not client.alive and self.respawns < MAX_RESPAWNS:
                self._ended(client)
                self.respawns += 1
                log.warning("client exited; replacing", slot=client.slot, process=client.process,
                            rc=client.popen.returncode)
                out.append(self.replace(client))
        return out

    def stop(self, clients: list[Client] | None = None, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM, then kill -9 whatever has not exited within ``grace`` seconds."""
        clients = self.all if clients is None else clients
        for c in clients:
            if c.alive:
                c.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for c in clients:
            try:
                c.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("client did not stop; kill -9", slot=c.slot, process=c.process)
                c.popen.kill()
                c.popen.wait()
            self._ended(c)
        for slot, c in list(self.live.items()):
            if c in clients:
                del self.live[slot]

    def kill_all(self) -> None:
        for c in self.all:
            if c.alive:
                c.popen.kill()
                c.popen.wait()


# --- workloads as the runner sees them ------------------------------------------------------------

class Workload:
    """Topics, client slots, the end condition and the final reads of one workload."""

    name = ""

    def __init__(self, opts: Options, run_id: str, bootstrap: str) -> None:
        self.opts, self.run_id, self.bootstrap = opts, run_id, bootstrap

    def base_spec(self) -> dict:
        return {"bootstrap": self.bootstrap, "isolation": self.opts.isolation, "seed": self.opts.seed,
                "partitions": PARTITIONS, "client_debug": self.opts.client_debug}

    def topics(self) -> list[str]:
        raise NotImplementedError

    def coordinator_keys(self) -> dict:
        return {}

    def start(self, clients: Clients) -> None:
        raise NotImplementedError

    def done(self) -> bool:
        """Whether the clients' work is complete once the faults are over (no drain needed)."""
        return True

    def killable(self, clients: Clients) -> list[Client]:
        return [c for c in clients.live.values() if c.alive]

    def subscribe_processes(self, clients: Clients) -> set[int]:
        return {c.process for c in clients.all if c.spec["role"] == "copier" or c.spec.get("mode") == "subscribe"}

    def after_run(self, writer: HistoryWriter, final_bootstrap: str) -> None:
        from tools.verify.workloads import final_read

        keys = [key_of(t, p) for t in self.topics() for p in range(PARTITIONS)]
        value, extra = final_read(final_bootstrap, keys, self.opts.isolation)
        writer.record("checker", OK, "final-read", value, **extra)


class TxnWorkload(Workload):
    name = "txn"

    def topics(self) -> list[str]:
        return [f"verify-txn-{self.run_id}"]

    def coordinator_keys(self) -> dict:
        return {"txn": [self.txid(i) for i in range(self.opts.producers)], "group": [self.group]}

    @property
    def group(self) -> str:
        return f"verify-sub-{self.run_id}"

    def txid(self, i: int) -> str:
        return f"verify-txn-{self.run_id}-{i}"

    def start(self, clients: Clients) -> None:
        base = {**self.base_spec(), "topic": self.topics()[0]}
        for i in range(self.opts.producers):
            if self.opts.no_idempotence:
                clients.start(f"producer-{i}", {**base, "role": "plain-producer", "idempotence": False,
                                                 "window": 5})
            else:
                clients.start(f"producer-{i}", {**base, "role": "txn-producer", "transactional_id": self.txid(i),
                                                 "poll_probability": 0.2, "abort_probability": 0.1,
                                                 "max_txn_length": self.opts.max_txn_length})
        for i in range(self.opts.consumers):
            mode = "assign" if i % 2 == 0 else "subscribe"
            clients.start(f"consumer-{i}", {**base, "role": "consumer", "mode": mode, "group": self.group})


class CopierWorkload(Workload):
    name = "copier"

    def __init__(self, opts: Options, run_id: str, bootstrap: str) -> None:
        super().__init__(opts, run_id, bootstrap)
        self.input_ends: dict[int, int] = {}
        self.clients: Clients | None = None
        self._last_check = 0.0

    @property
    def input(self) -> str:
        return f"verify-in-{self.run_id}"

    @property
    def output(self) -> str:
        return f"verify-out-{self.run_id}"

    @property
    def group(self) -> str:
        return f"verify-copier-{self.run_id}"

    def txid(self, i: int) -> str:
        return f"verify-copier-{self.run_id}-{i}"

    def topics(self) -> list[str]:
        return [self.input, self.output]

    def coordinator_keys(self) -> dict:
        return {"txn": [self.txid(i) for i in range(self.opts.copiers)], "group": [self.group]}

    def start(self, clients: Clients) -> None:
        """The loader (``--records`` values at a steady rate over most of ``--seconds``) and
        the copiers, together: the input grows while it is copied and faulted."""
        self.clients = clients
        rate = self.opts.records / max(self.opts.seconds * LOAD_SHARE, 1.0)
        clients.start("loader", {**self.base_spec(), "role": "loader", "topic": self.input,
                                 "records": self.opts.records, "window": 1000, "rate": rate,
                                 "idempotence": not self.opts.no_idempotence})
        base = {**self.base_spec(), "input": self.input, "output": self.output, "group": self.group,
                "batch": 100, "abort_every": 9}
        for i in range(self.opts.copiers):
            clients.start(f"copier-{i}", {**base, "role": "copier", "transactional_id": self.txid(i)})

    def loaded(self) -> bool:
        """Whether the loader has finished; the input's ends are read once it has."""
        from tools.verify.workloads import high_watermarks

        if self.input_ends:
            return True
        if self.clients is None or "loader" in self.clients.live:
            return False
        try:
            self.input_ends = high_watermarks(self.bootstrap, self.input, PARTITIONS)
        except Exception as exc:  # noqa: BLE001 - a fault may hide a leader; asked again later
            log.debug("input ends unavailable", error=str(exc))
            return False
        log.info("input loaded", records=self.opts.records, ends=self.input_ends)
        return True

    def killable(self, clients: Clients) -> list[Client]:
        return [c for c in clients.live.values() if c.alive and c.spec["role"] == "copier"]

    def done(self) -> bool:
        """The input loaded and the group's committed offsets at its ends (asked at most
        every 2 s)."""
        if not self.loaded() or time.monotonic() - self._last_check < 2.0:
            return False
        self._last_check = time.monotonic()
        try:
            committed = self.committed()
        except Exception as exc:  # noqa: BLE001 - a fault may hide the coordinator
            log.debug("committed offsets unavailable", error=str(exc))
            return False
        return all(committed.get(p, -1) >= end for p, end in self.input_ends.items())

    def committed(self) -> dict[int, int]:
        from tools.verify.workloads import committed_offsets

        return committed_offsets(self.bootstrap, self.group, self.input, PARTITIONS)

    def after_run(self, writer: HistoryWriter, final_bootstrap: str) -> None:
        from tools.verify.workloads import committed_offsets

        super().after_run(writer, final_bootstrap)
        offsets = committed_offsets(final_bootstrap, self.group, self.input, PARTITIONS)
        writer.record("checker", OK, "committed-offsets",
                      {"group": self.group, "offsets": {key_of(self.input, p): o for p, o in offsets.items()}})
        writer.record("checker", OK, "copy", {
            "group": self.group,
            "pairs": {key_of(self.input, p): key_of(self.output, p) for p in range(PARTITIONS)}})


WORKLOADS = {"txn": TxnWorkload, "copier": CopierWorkload}


# --- faults ---------------------------------------------------------------------------------------

class Schedule:
    """Every ``interval`` s: one random target fault (held ``hold`` s, then undone) and, when
    ``client-kill`` is listed, a client killed -9 and replaced in the same tick."""

    def __init__(self, opts: Options, nemeses: list, clients: Clients, workload: Workload,
                 writer: HistoryWriter) -> None:
        self.opts, self.nemeses, self.clients, self.workload = opts, nemeses, clients, workload
        self.writer = writer
        self.client_kill = CLIENT_FAULT in opts.nemesis
        self.rng = random.Random(opts.seed)
        self.next_tick = time.monotonic() + min(opts.interval, 5.0)
        self.active: list[tuple[float, object]] = []  # (undo at, nemesis)
        self.faults = 0

    def step(self, now: float) -> None:
        for undo_at, nemesis in list(self.active):
            if now >= undo_at:
                self.undo(nemesis)
        if now >= self.next_tick:
            self.next_tick = now + self.opts.interval
            self.tick(now)

    def tick(self, now: float) -> None:
        idle = [n for n in self.nemeses if all(n is not a for _, a in self.active)]
        if idle:
            nemesis = self.rng.choice(idle)
            try:
                info = nemesis.start(self.rng) or {}
            except Exception as exc:  # noqa: BLE001 - a fault that could not start is logged
                log.warning("fault did not start", fault=nemesis.name, error=repr(exc))
                info = {"error": repr(exc)}
            self.writer.record("nemesis", INFO, nemesis.name, {"phase": "start", **info})
            log.info("fault", fault=nemesis.name, **_short(info))
            self.active.append((now + self.opts.hold, nemesis))
            self.faults += 1
        if self.client_kill:
            self.kill_client()

    def undo(self, nemesis) -> None:
        self.active = [(t, n) for t, n in self.active if n is not nemesis]
        try:
            info = nemesis.stop() or {}
        except Exception as exc:  # noqa: BLE001 - heal_all retries at the end
            log.warning("fault did not stop", fault=nemesis.name, error=repr(exc))
            info = {"error": repr(exc)}
        self.writer.record("nemesis", INFO, nemesis.name, {"phase": "stop", **info})
        log.info("fault healed", fault=nemesis.name, **_short(info))

    def kill_client(self) -> None:
        victims = self.workload.killable(self.clients)
        if not victims:
            return
        victim = self.rng.choice(victims)
        self.writer.record("nemesis", INFO, CLIENT_FAULT,
                           {"phase": "start", "process": victim.process, "slot": victim.slot})
        self.clients.kill9(victim)
        new = self.clients.replace(victim)
        self.writer.record("nemesis", INFO, CLIENT_FAULT,
                           {"phase": "stop", "process": victim.process, "replacement": new.process,
                            "slot": victim.slot})
        log.info("client killed", slot=victim.slot, process=victim.process, replacement=new.process)
        self.faults += 1

    def heal(self) -> None:
        for _, nemesis in list(self.active):
            self.undo(nemesis)


def _base(fault: str) -> str:
    """The capability a fault needs: ``proxy-delay`` the proxy, ``coordinator-pause`` the
    coordinator one, ``etcd-member`` its own (:func:`tools.verify.nemesis.capability`)."""
    if fault == CLIENT_FAULT:
        return fault
    from tools.verify.nemesis import capability

    return capability(fault)


def _short(info: dict) -> dict:
    return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool)) and k != "phase"}


# --- progress -------------------------------------------------------------------------------------

class Progress:
    """Counts completions in the clients' history files as they grow."""

    def __init__(self, history_dir: Path) -> None:
        self.dir = history_dir
        self.offsets: dict[str, int] = {}
        self.counts = {OK: 0, "fail": 0, INFO: 0}
        self.records = 0      # values in ok completions
        self.txn_records = 0  # of which in committed transactions

    def update(self) -> dict:
        for path in sorted(self.dir.glob("p*.jsonl")):
            pos = self.offsets.get(path.name, 0)
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path.name] = pos + end
            for line in data[:end].splitlines():
                self._count(line)
        return dict(self.counts, records=self.records, txn_records=self.txn_records)

    def _count(self, line: bytes) -> None:
        try:
            d = json.loads(line)
        except ValueError:
            return
        if d.get("type") in self.counts and d.get("f") in ("txn", "send", "poll"):
            self.counts[d["type"]] += 1
            if d["type"] == OK:
                n = sum(1 for m in d.get("value") or [] if m and m[0] == "send")
                self.records += n
                if d["f"] == "txn":
                    self.txn_records += n


# --- history --------------------------------------------------------------------------------------

def read_lines(path: Path) -> list[Op]:
    """A client's file; a torn last line (the client was killed mid-write) is dropped."""
    ops = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                ops.extend(parse_history([line]))
            except ValueError:
                log.warning("torn history line dropped", file=path.name)
    return ops


def merge_history(history_dir: Path, out_path: Path, ended: dict[int, float] | None = None) -> list[Op]:
    """Every file's operations by time (ties: file, then line), ``index`` renumbered.

    An operation a client invoked but never completed (it was killed -9, or crashed) gets an
    ``info`` completion, as Jepsen's interpreter records for a crashed process, at the time
    the runner saw the client end (``ended``: process -> time) or else its last operation."""
    ended = ended or {}
    tagged = []
    for n, path in enumerate(sorted(history_dir.glob("*.jsonl"))):
        ops = read_lines(path)
        tagged.extend((op.time, n, op.index, op) for op in ops)
        last = max((op.time for op in ops), default=0.0)
        for i, inv in enumerate(unfinished(ops)):
            t = max(ended.get(inv.process, last), inv.time)
            done = Op(0, t, inv.process, INFO, inv.f, inv.value, "no completion: the client was killed or crashed")
            tagged.append((t, n, len(ops) + i, done))
    tagged.sort(key=lambda t: t[:3])
    ops = []
    with open(out_path, "w", encoding="utf-8") as f:
        for i, (_, _, _, op) in enumerate(tagged):
            op.index = i
            f.write(op.to_json() + "\n")
            ops.append(op)
    return ops


# --- the run --------------------------------------------------------------------------------------

def configure_logging(verbose: bool = False) -> None:
    import logging

    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=True),
                    structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if verbose else logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def default_out(opts: Options) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return os.path.join("verify-runs", f"{stamp}-{opts.workload}-{opts.target.replace(':', '_').replace(',', '+')}")


class Run:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.out = Path(opts.out or default_out(opts)).resolve()
        self.history_dir = self.out / "history"
        self.history_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.history_dir.glob("*.jsonl"):
            stale.unlink()
        self.started = time.monotonic()
        self.run_id = f"{opts.seed}-{int(time.time()) % 100000000}"
        self.writer = HistoryWriter(str(self.history_dir / "runner.jsonl"), started=self.started)
        self.clients = Clients(self.history_dir, self.started)
        self.target = None
        self.proxy = None
        self.nemeses: list = []
        self.schedule: Schedule | None = None
        self.stats: dict = {}

    # -- set-up
    def start_target(self) -> str:
        from tools.verify.targets import make_target

        self.target = make_target(self.opts.target, str(self.out / "target"), faults=self.opts.nemesis)
        unsupported = [n for n in self.opts.nemesis
                       if n != CLIENT_FAULT and _base(n) not in getattr(self.target, "capabilities", ())]
        if unsupported:
            from tools.verify.nemesis import unsupported_message

            raise ValueError(unsupported_message(self.target, ",".join(unsupported)))
        t0 = time.monotonic()
        log.info("starting target", target=self.opts.target)
        self.target.start()
        self.target.wait_healthy(120)
        log.info("target healthy", bootstrap=self.target.bootstrap, seconds=round(time.monotonic() - t0, 1))
        return self.target.bootstrap

    def client_bootstrap(self, bootstrap: str) -> str:
        if not any(_base(n) == "proxy" for n in self.opts.nemesis) and not self.opts.no_idempotence:
            return bootstrap
        from tools.verify.proxy import KafkaProxy

        self.proxy = KafkaProxy(bootstrap, seed=self.opts.seed).start()
        if self.opts.no_idempotence:
            self.proxy.duplicate(0.3)
        return self.proxy.bootstrap

    def make_nemeses(self, workload: Workload) -> list:
        names = [n for n in self.opts.nemesis if n not in (CLIENT_FAULT, "none")]
        if not names:
            return []
        from tools.verify.nemesis import make_nemeses

        return make_nemeses(names, self.target, proxy=self.proxy, coordinator_keys=workload.coordinator_keys())

    # -- the run
    def run(self) -> int:
        previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up as Ctrl-C does
        try:
            result = self._run()
        except KeyboardInterrupt:
            log.error("interrupted; stopping everything")
            return 130
        finally:
            self.clients.kill_all()
            if self.proxy is not None:
                self.proxy.stop()
            if self.target is not None:
                self.target.stop()
            self.writer.close()
            signal.signal(signal.SIGTERM, previous)
        print(result.verdict_line(), flush=True)
        return 0 if result.valid else 1

    def _run(self):
        bootstrap = self.start_target()
        from tools.verify.workloads import create_topics

        workload = WORKLOADS[self.opts.workload](self.opts, self.run_id, self.client_bootstrap(bootstrap))
        create_topics(bootstrap, workload.topics(), PARTITIONS, REPLICATION, MIN_ISR)
        log.info("topics created", topics=workload.topics())
        try:
            self.nemeses = self.make_nemeses(workload)
            self.drive(workload)
            self.drain(workload)
        finally:
            self.heal()
            self.clients.stop()
        self.final_reads(workload, bootstrap)
        return self.check(workload)

    def drive(self, workload: Workload) -> None:
        workload.start(self.clients)
        self.schedule = Schedule(self.opts, self.nemeses, self.clients, workload, self.writer)
        progress = Progress(self.history_dir)
        t0 = time.monotonic()
        deadline, next_report = t0 + self.opts.seconds, t0 + 5.0
        log.info("workload running", workload=workload.name, seconds=self.opts.seconds,
                 faults=self.opts.nemesis or ["none"])
        while (now := time.monotonic()) < deadline:
            self.schedule.step(now)
            self.clients.respawn_dead()
            if now >= next_report:
                next_report = now + 5.0
                log.info("progress", t=round(now - t0), **progress.update(), faults=self.schedule.faults)
            time.sleep(0.2)
        self.progress, self.t0 = progress, t0
        self.stats = {"workload_seconds": round(time.monotonic() - t0, 1), "fault_seconds": self.opts.seconds,
                      **progress.update()}

    def drain(self, workload: Workload) -> None:
        """The faults undone, the clients may finish their work (the copier: catch up with its
        input), for at most ``DRAIN_S`` seconds."""
        if workload.done():
            return
        self.heal()
        log.info("faults over; clients finishing", bound_s=DRAIN_S)
        t_drain = time.monotonic()
        deadline, next_report = t_drain + DRAIN_S, t_drain + 5.0
        while not workload.done():
            if (now := time.monotonic()) >= deadline:
                log.warning("clients did not finish after the faults", seconds=DRAIN_S)
                break
            self.clients.respawn_dead()
            if now >= next_report:
                next_report = now + 5.0
                log.info("progress", t=round(now - self.t0), **self.progress.update(), draining=True)
            time.sleep(0.2)
        else:
            log.info("clients finished: committed offsets at the input ends")
        self.stats.update(workload_seconds=round(time.monotonic() - self.t0, 1),
                          drain_seconds=round(time.monotonic() - t_drain, 1), **self.progress.update())

    def heal(self) -> None:
        if self.schedule is not None:
            self.schedule.heal()
        if self.nemeses:
            from tools.verify.nemesis import heal_all

            try:
                heal_all(self.nemeses)
            except Exception as exc:  # noqa: BLE001 - health below says whether it worked
                log.warning("heal_all failed", error=repr(exc))
        if self.proxy is not None:
            self.proxy.normal()

    def final_reads(self, workload: Workload, bootstrap: str) -> None:
        log.info("faults healed; waiting for health")
        if self.target.wait_healthy(120) is False:
            log.warning("the target is not healthy after 120 s; reading anyway")
            self.stats["unhealthy_at_final_read"] = True
        t0 = time.monotonic()
        workload.after_run(self.writer, bootstrap)
        log.info("final read done", seconds=round(time.monotonic() - t0, 1))

    def check(self, workload: Workload):
        from tools.verify.checker import check
        from tools.verify.report import write_report

        self.writer.close()
        history = merge_history(self.history_dir, self.out / "history.jsonl", self.clients.ended)
        result = check(history, isolation=self.opts.isolation,
                       subscribe_processes=workload.subscribe_processes(self.clients))
        (self.out / "result.json").write_text(_result_json(result, self.opts, self.stats))
        write_report(str(self.out / "report.html"), result, history, self.opts.params(), self.stats)
        log.info("written", history=str(self.out / "history.jsonl"), result=str(self.out / "result.json"),
                 report=str(self.out / "report.html"), ops=len(history))
        return result


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def _result_json(result, opts: Options, stats: dict) -> str:
    d = json.loads(result.to_json()) if isinstance(result.to_json(), str) else dict(result.to_json())
    d["params"] = opts.params()
    d["run"] = stats
    return json.dumps(d, indent=2, default=str)


def run(opts: Options) -> int:
    """Run once; the exit code is 0 only when the history is valid."""
    return Run(opts).run()


__all__ = ["Options", "run", "merge_history", "INVOKE"]
