"""The standard matrix of verification runs (``make verify``): workloads x faults x targets.

Owns the list of standard runs and the results table: each run is ``python -m tools.verify``
(its own process, its own target started and stopped), its ``result.json`` is kept under
``verify-runs/matrix/`` (merged with earlier runs, so a partial matrix updates its cells only)
and the table is rewritten between the markers in ``docs/verify.md``. Where it knowingly
differs from Jepsen: Jepsen has no matrix runner (one ``lein run test`` per configuration);
faults a target cannot do (``etcd``, ``etcd-member`` and ``etcd-leader`` on Apache Kafka, whose
metadata quorum is its own nodes) are cells marked n/a, not failures: the run refuses them in
one line, and a cell never run shows n/a when the target's capabilities exclude it.

``python -m tools.verify.matrix [--targets devcluster,kafka] [--workloads txn,copier]
[--faults kill9,pause,...] [--seconds 60] [--txn-seconds 120] [--records 100000] [--repeat 1]``
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import structlog

log = structlog.get_logger("verify.matrix")

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "verify.md"
RUNS = REPO / "verify-runs" / "matrix"
START, END = "<!-- verify-matrix:start -->", "<!-- verify-matrix:end -->"

TARGETS = ("devcluster", "kafka")
WORKLOADS = ("txn", "copier")
# One fault at a time, then issue 18's mix (broker faults and copier kills in the same tick).
FAULTS = ("none", "kill9", "pause", "term", "partition", "etcd", "machine", "etcd-member", "etcd-leader",
          "coordinator", "proxy", "client-kill", "kill9,pause,term,client-kill")
ISSUE18_INTERVAL = 15.0


def cell_key(target: str, workload: str, faults: str) -> str:
    return f"{target}|{workload}|{faults}"


def applicable(target: str, faults: str) -> bool:
    """Whether ``target`` can do every fault of the set (``client-kill`` is the runner's; an
    unknown target is given the benefit of the doubt)."""
    from tools.verify.nemesis import capability
    from tools.verify.targets import spec_capabilities

    can = spec_capabilities(target)
    names = [n.strip() for n in faults.split(",") if n.strip() not in ("", "none", "client-kill")]
    return can is None or all(capability(n) in can for n in names)


def run_one(target: str, workload: str, faults: str, seconds: float, records: int, seed: int,
            timeout: float) -> dict:
    """One run; returns the cell: verdict, counts, measured records and rates."""
    out = RUNS / f"{target}-{workload}-{faults.replace(',', '+')}-{seed}"
    cmd = [sys.executable, "-m", "tools.verify", "--target", target, "--workload", workload,
           "--nemesis", faults, "--seconds", str(seconds), "--records", str(records), "--seed", str(seed),
           "--interval", str(ISSUE18_INTERVAL), "--out", str(out)]
    t0 = time.monotonic()
    log.info("run", target=target, workload=workload, faults=faults)
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = -1, exc.stdout or "", f"timed out after {timeout}s"
    out.mkdir(parents=True, exist_ok=True)
    (out / "stderr.txt").write_text(stderr if isinstance(stderr, str) else stderr.decode(errors="replace"))
    verdict = _last_line(stdout if isinstance(stdout, str) else stdout.decode(errors="replace"))
    cell = {"target": target, "workload": workload, "faults": faults, "seed": seed, "rc": rc,
            "verdict": verdict, "wall_s": round(time.monotonic() - t0), "out": str(out.relative_to(REPO)),
            "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    result_path = out / "result.json"
    if rc in (0, 1) and result_path.exists():
        result = json.loads(result_path.read_text())
        run = result.get("run", {})
        cell.update(valid=result.get("valid"), counts=result.get("counts", {}),
                    bad=result.get("bad-error-types", []), records=run.get("records"),
                    txn_records=run.get("txn_records"), ok_ops=run.get("ok"),
                    seconds=run.get("workload_seconds"), drain=run.get("drain_seconds"))
    else:
        cell["valid"] = None
        cell["error"] = _unsupported(stderr) or verdict or f"exit {rc}"
    log.info("result", target=target, workload=workload, faults=faults, verdict=verdict, wall_s=cell["wall_s"])
    return cell


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _unsupported(stderr) -> str | None:
    text = stderr if isinstance(stderr, str) else ""
    for marker in ("cannot do the", "TargetUnavailable", "not installed", "unavailable"):
        for line in text.splitlines():
            if marker in line:
                return "n/a: " + line.strip()[-160:]
    return None


# --- the table ------------------------------------------------------------------------------------

def load_cells() -> dict[str, list[dict]]:
    path = RUNS / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_cells(cells: dict[str, list[dict]]) -> None:
    RUNS.mkdir(parents=True, exist_ok=True)
    (RUNS / "results.json").write_text(json.dumps(cells, indent=1, sort_keys=True))


def render_cell(runs: list[dict] | None, applies: bool = True) -> str:
    """The cell of one (target, workload, faults): every run of the last batch; invalid if
    any run was. A cell never run is n/a where the target cannot do the faults."""
    if not runs:
        return "not run" if applies else "n/a"
    done = [r for r in runs if r.get("valid") is not None]
    if not done:
        err = str(runs[-1].get("error", ""))
        return "n/a" if err.startswith("n/a") else f"error ({err[:60]})"
    bad_runs = [r for r in done if r["valid"] is False]
    shown = bad_runs[0] if bad_runs else done[-1]
    if bad_runs:
        bad = {k: v for k, v in (shown.get("counts") or {}).items() if k in (shown.get("bad") or [])}
        head = "**INVALID** " + " ".join(f"{k}={v}" for k, v in bad.items())
    else:
        head = "**valid**"
    if len(runs) > 1:
        head += f" ({len(done) - len(bad_runs)}/{len(runs)} runs valid)"
    # A run kept from before the workloads last changed (marked in results.json) says so.
    earlier = " (earlier workloads)" if shown.get("earlier_definition") else ""
    return f"{head}: {_records(shown)}{earlier}"


def _records(run: dict) -> str:
    """What the run moved: values loaded and copied (copier) or committed (txn), and the rate."""
    _backfill(run)
    records, txn, seconds = run.get("records") or 0, run.get("txn_records"), run.get("seconds") or 0
    if txn is None:
        return f"{records} records in {seconds:.0f} s"
    rate = f"{txn / max(seconds, 1):.0f}/s"
    drain = run.get("drain") or 0
    took = f"{seconds - drain:.0f} s + {drain:.0f} s catching up" if drain >= 1 else f"{seconds:.0f} s"
    if run.get("workload") == "copier":
        return f"{records - txn} loaded, {txn} copied in {took} ({rate})"
    return f"{txn} committed in {took} ({rate})"


def _backfill(run: dict) -> None:
    """Runs stored before ``txn_records`` was measured: count it from their history."""
    if run.get("txn_records") is not None or not run.get("out"):
        return
    history = REPO / run["out"] / "history"
    if history.is_dir():
        from tools.verify.runner import Progress

        counts = Progress(history).update()
        run["records"], run["txn_records"] = counts["records"], counts["txn_records"]


NAMES = {"devcluster": "kbroker (devcluster)", "kafka": "Apache Kafka 4.3.1 (KRaft)"}


def render(cells: dict[str, list[dict]], kept: dict[str, str] | None = None, last_run: str = "") -> str:
    """The table: each cell from its stored runs, else as ``kept`` (the table already in the doc)
    shows it, so that a narrowed matrix on a fresh clone (no ``results.json``) rewrites only the
    cells it ran."""
    kept = {k: v for k, v in (kept or {}).items() if k not in cells}
    keys = [k.split("|", 2) for k in (*cells, *kept)]
    seen = {t for t, _, _ in keys}
    targets = [t for t in TARGETS if t in seen] or list(TARGETS)
    targets += sorted(seen - set(targets))
    rows = sorted({(w, f) for _, w, f in keys},
                  key=lambda r: (WORKLOADS.index(r[0]) if r[0] in WORKLOADS else 9,
                                 FAULTS.index(r[1]) if r[1] in FAULTS else 99, r[1]))
    lines = ["| workload | faults | " + " | ".join(NAMES.get(t, t) for t in targets) + " |",
             "|---|---|" + "---|" * len(targets)]
    for workload, faults in rows:
        row = []
        for t in targets:
            key = cell_key(t, workload, faults)
            text = kept.get(key)
            if text is None or text == "not run":
                text = render_cell(cells.get(key), applicable(t, faults))
            row.append(text)
        lines.append(f"| {workload} | `{faults}` | " + " | ".join(row) + " |")
    when = max((r.get("when", "") for c in cells.values() for r in c), default="") or last_run
    return "\n".join(lines) + f"\n\nLast run: {when} UTC. Runs and reports: `verify-runs/matrix/`.\n"


def table_cells(table: str) -> dict[str, str]:
    """The cells of a rendered table, by cell key (the inverse of :func:`render`'s rows)."""
    by_name = {v: k for k, v in NAMES.items()}
    lines = [line for line in table.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        return {}
    targets = [by_name.get(h.strip(), h.strip()) for h in lines[0].strip("|").split("|")[2:]]
    cells = {}
    for line in lines[2:]:
        workload, faults, *row = (c.strip() for c in line.strip().strip("|").split(" | "))
        for target, text in zip(targets, row):
            # "not run" too: a row of the standard matrix stays until its cells are run
            cells[cell_key(target, workload, faults.strip("`"))] = text
    return cells


def write_doc(cells: dict[str, list[dict]]) -> None:
    text = DOC.read_text() if DOC.exists() else f"# kbroker-verify\n\n{START}\n{END}\n"
    if START not in text:
        text += f"\n{START}\n{END}\n"
    head, _, rest = text.partition(START)
    table, _, tail = rest.partition(END)
    last_run = re.search(r"^Last run: (.*?) UTC", table, re.M)
    DOC.write_text(f"{head}{START}\n{render(cells, table_cells(table), last_run.group(1) if last_run else '')}"
                   f"{END}{tail}")


# --- command line ---------------------------------------------------------------------------------

def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(";" if ";" in text else "|") if x.strip()] if text else []


def main(argv: list[str] | None = None) -> int:
    from tools.verify.runner import configure_logging

    p = argparse.ArgumentParser(prog="python -m tools.verify.matrix", description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--faults", default="|".join(FAULTS),
                   help="fault sets separated by | (a set is a comma list, as --nemesis)")
    p.add_argument("--seconds", type=float, default=60.0, help="seconds of faults a copier run")
    p.add_argument("--txn-seconds", type=float, default=120.0,
                   help="seconds of faults a txn run (its transactions commit some 25-50k values a minute)")
    p.add_argument("--records", type=int, default=100000,
                   help="copier input records, loaded while it copies (at ~1-2k copied/s, enough for 60 s)")
    p.add_argument("--repeat", type=int, default=1, help="runs per cell (seeds 1..N); the last one is shown")
    p.add_argument("--timeout", type=float, default=900.0, help="per run")
    p.add_argument("--render-only", action="store_true", help="rewrite the table from the stored results")
    args = p.parse_args(argv)
    configure_logging()
    cells = load_cells()
    failures = 0
    if not args.render_only:
        for target in [t for t in args.targets.split(",") if t]:
            for workload in [w for w in args.workloads.split(",") if w]:
                for faults in _list(args.faults):
                    key, batch = cell_key(target, workload, faults), []
                    for seed in range(1, args.repeat + 1):
                        seconds = args.txn_seconds if workload == "txn" else args.seconds
                        batch.append(run_one(target, workload, faults, seconds, args.records, seed,
                                             args.timeout))
                        failures += batch[-1].get("valid") is False
                        cells[key] = batch
                        save_cells(cells)
                        write_doc(cells)
        log.info("matrix done", invalid=failures, doc=str(DOC))
    write_doc(cells)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
