"""py-spy profiles of running brokers: where an idle (or loaded) broker spends its CPU.

For each process, two py-spy samplers run side by side for the same seconds (``--nonblocking``:
the broker is never paused): one writes py-spy's flame graph (SVG), the other its collapsed
stacks (py-spy's ``raw`` format), from which :func:`summarize` counts the samples each function
was on the stack (inclusive) and at its top (self). py-spy leaves out samples of a thread that
is waiting (in ``epoll_wait``, a lock, ``sleep``), so ``busy_cores`` is the share of the samples
that found the broker's threads working, an estimate of its CPU from the same run.

    python bench/cpu_profile.py --pid 1234 --seconds 30 --out bench/results/idle   # one process
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The event loop's and the interpreter's own frames (``Runner.run`` and the like, by their
# unqualified name): on every stack, so they say nothing.
RUNTIME_FRAMES = {"<module>", "_run_module_as_main", "_run_code", "run", "run_until_complete",
                  "run_forever", "_run_once", "_run", "main", "_bootstrap", "_bootstrap_inner",
                  "_worker"}
NO_SAMPLES = "No stack counts found"
FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: make install (the dev extra) installs it")
    return found


def record(pids: dict[str, int], seconds: float, out: Path, rate: int = 100) -> dict[str, dict]:
    """Profile each named process for ``seconds``; returns :func:`summarize` per name and
    writes ``<out>-<name>.svg`` (flame graph) and ``<out>-<name>.txt`` (collapsed stacks)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    exe, procs = py_spy(), []
    for name, pid in pids.items():
        for fmt, suffix in (("flamegraph", ".svg"), ("raw", ".txt")):
            path = out.with_name(f"{out.name}-{name}{suffix}")
            procs.append(subprocess.Popen(
                [exe, "record", "--nonblocking", "--pid", str(pid), "--duration", str(int(seconds)),
                 "--rate", str(rate), "--format", fmt, "--output", str(path)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        try:
            output, _ = p.communicate(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"py-spy did not finish within {seconds + 120:.0f} s") from None
        # A process that never left its event loop's wait gives py-spy nothing to draw.
        if p.returncode != 0 and NO_SAMPLES not in output:
            raise RuntimeError(f"py-spy failed ({p.returncode}): {output.strip()[-500:]}")
    summaries = {}
    for name in pids:
        svg, raw = (out.with_name(f"{out.name}-{name}{suffix}") for suffix in (".svg", ".txt"))
        if svg.exists():  # its title is py-spy's command line: no path of this machine
            svg.write_text(svg.read_text().replace(exe, "py-spy").replace(str(REPO) + "/", ""))
        summaries[name] = summarize(raw.read_text() if raw.exists() else "", seconds, rate)
    return summaries


def _function(frame: str) -> str:
    """``name (path:line)`` as ``name (path)``, the path relative to the repository or to
    site-packages."""
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    if path.startswith(str(REPO) + "/"):
        path = path[len(str(REPO)) + 1:]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python" in path:
        path = "stdlib/" + path.split("/lib/python", 1)[1].split("/", 1)[-1]
    return f"{m.group('name')} ({path})"


PERIODIC_PASS = re.compile(r"Broker\._\w+_pass \(")


def summarize(collapsed: str, seconds: float, rate: int, top: int = 15) -> dict:
    """Samples per function from py-spy's collapsed stacks (``frame;frame;... count``)."""
    inclusive, self_, total = Counter(), Counter(), 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_function(f) for f in stack.split(";")]
        self_[frames[-1]] += n
        for f in set(frames):
            if f.split(" (", 1)[0].rsplit(".", 1)[-1] not in RUNTIME_FRAMES:
                inclusive[f] += n

    def share(counter: Counter) -> list[dict]:
        return [{"function": f, "samples": n, "share": round(n / total, 4)} for f, n in counter.most_common(top)]

    # The broker's periodic passes (Broker._periodic's callees), each however few its samples.
    passes = {f.split(" (", 1)[0]: n for f, n in inclusive.items() if PERIODIC_PASS.match(f)}
    return {"samples": total, "busy_cores": round(total / (rate * seconds), 4),
            "inclusive": share(inclusive), "self": share(self_),
            "passes": {f: {"samples": n, "cores": round(n / (rate * seconds), 5)} for f, n in sorted(passes.items())}}


def render(name: str, summary: dict, rows: int = 8) -> str:
    lines = [f"{name}: {summary['samples']} busy samples, about {summary['busy_cores']:.3f} cores"]
    lines += [f"  {r['share']:6.1%}  {r['function']}" for r in summary["inclusive"][:rows]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pid", type=int, action="append", required=True, help="a process to profile (repeatable)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=int, default=100, help="samples per second")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cpu_profile")
    args = ap.parse_args(argv)
    summaries = record({f"pid{p}": p for p in args.pid}, args.seconds, args.out, args.rate)
    for name, s in summaries.items():
        print(render(name, s))
    args.out.with_suffix(".json").write_text(json.dumps(summaries, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
