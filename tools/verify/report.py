"""The HTML report of a verification run: verdict, parameters, plots and anomaly examples.

Owns the rendering only (one self-contained HTML file, the plots as base64 PNGs drawn with
matplotlib's Agg backend): throughput (ok operations a second) and latency over time with the
fault intervals shaded, anomalies by kind, then each anomaly kind's first examples with the
operations that show it. Where it knowingly differs from Jepsen: Jepsen writes a directory of
plots and text files (``latency-raw.png``, ``rate.png``, ``elle/``); here it is one page.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import defaultdict
from typing import Any

from tools.verify.history import CLIENT_FS, INVOKE, Op, completion_key

EXAMPLES_PER_KIND = 5
OPS_PER_EXAMPLE = 8
TYPE_COLORS = {"ok": "#2a9d3f", "fail": "#d62728", "info": "#ff9f1c"}
FAULT_COLORS = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#d9d9d9", "#c7e9c0", "#fdd0a2"]


# --- data from the history ------------------------------------------------------------------------

def completions(history: list[Op]) -> list[tuple[Op, Op]]:
    """(invoke, completion) of every client operation that completed."""
    open_: dict[Any, Op] = {}
    out = []
    for op in history:
        if op.f not in CLIENT_FS:
            continue
        key = completion_key(op)
        if op.type == INVOKE:
            open_[key] = op
        elif key in open_:
            out.append((open_.pop(key), op))
    return out


def _sends(op: Op) -> int:
    return sum(1 for m in op.value or [] if isinstance(m, list) and m and m[0] == "send")


def fault_intervals(history: list[Op]) -> list[tuple[str, float, float]]:
    """(fault, start, stop) from the nemesis operations; one still open ends at the last op."""
    end = history[-1].time if history else 0.0
    starts: dict[str, list[float]] = defaultdict(list)
    out = []
    for op in history:
        if op.process != "nemesis" or not isinstance(op.value, dict):
            continue
        phase = op.value.get("phase")
        if phase == "start":
            starts[op.f].append(op.time)
        elif phase == "stop" and starts[op.f]:
            out.append((op.f, starts[op.f].pop(0), op.time))
    for f, ts in starts.items():
        out.extend((f, t, end) for t in ts)
    return sorted(out, key=lambda i: i[1])


# --- plots ----------------------------------------------------------------------------------------

def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _figure().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _shade(ax, intervals: list[tuple[str, float, float]]) -> None:
    colors: dict[str, str] = {}
    for f, t0, t1 in intervals:
        color = colors.setdefault(f, FAULT_COLORS[len(colors) % len(FAULT_COLORS)])
        label = f if f not in [h.get_label() for h in ax.patches + ax.lines] else None
        if t1 - t0 < 0.5:  # an instant fault (a client kill): a line
            ax.axvline(t0, color=color, linewidth=1.5, alpha=0.9, label=label, zorder=0)
        else:
            ax.axvspan(t0, t1, color=color, alpha=0.35, label=label, zorder=0)


def throughput_plot(pairs: list[tuple[Op, Op]], intervals) -> str:
    plt = _figure()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    _shade(ax, intervals)
    end = int(max((c.time for _, c in pairs), default=0)) + 1
    for type_, color in TYPE_COLORS.items():
        per_s = [0] * end
        for _, c in pairs:
            if c.type == type_:
                per_s[int(c.time)] += 1
        if any(per_s):
            ax.plot(range(end), per_s, color=color, label=f"{type_} ops/s", linewidth=1.2)
    acked = [0] * end
    for _, c in pairs:
        if c.type == "ok":
            acked[int(c.time)] += _sends(c)
    if any(acked):
        ax.plot(range(end), acked, color="#1f77b4", linestyle="--", linewidth=1, label="records sent ok/s")
    ax.set_yscale("symlog", linthresh=10)  # a loader's thousands and a copier's tens
    ax.set_xlabel("time since the run began (s)")
    ax.set_ylabel("per second (symlog)")
    ax.set_title("Throughput (client operations completed per second), faults shaded")
    ax.legend(loc="upper right", fontsize=8, ncol=3)
    ax.set_xlim(0, max(end, 1))
    return _png(fig)


def latency_plot(pairs: list[tuple[Op, Op]], intervals) -> str:
    plt = _figure()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    _shade(ax, intervals)
    for type_, color in TYPE_COLORS.items():
        pts = [(i.time, max((c.time - i.time) * 1000, 0.1)) for i, c in pairs if c.type == type_]
        if pts:
            xs, ys = zip(*pts)
            ax.scatter(xs, ys, s=3, color=color, alpha=0.5, label=type_, linewidths=0)
    ax.set_yscale("log")
    ax.set_xlabel("time invoked (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency of each client operation, faults shaded")
    ax.legend(loc="upper right", fontsize=8, ncol=4, markerscale=4)
    return _png(fig)


def anomalies_plot(counts: dict[str, int], bad: set[str] | None = None) -> str:
    """Red: kinds that make the run invalid; grey: allowed ones (Jepsen's allowances)."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(10, 2.8))
    kinds = sorted(counts, key=lambda k: (bad is not None and k not in bad, k))
    if kinds:
        colors = ["#d62728" if bad is None or k in bad else "#9a9a9a" for k in kinds]
        bars = ax.bar(kinds, [counts[k] for k in kinds], color=colors)
        ax.bar_label(bars, fontsize=8)
        if bad is not None and set(kinds) - bad:
            ax.set_title("Anomalies by kind (grey: allowed)")
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    else:
        ax.text(0.5, 0.5, "no anomalies", ha="center", va="center", transform=ax.transAxes, fontsize=14)
        ax.set_xticks([])
    ax.set_ylabel("count")
    if not ax.get_title():
        ax.set_title("Anomalies by kind")
    return _png(fig)


# --- HTML -----------------------------------------------------------------------------------------

def _op_dict(op) -> dict:
    if isinstance(op, Op):
        d = json.loads(op.to_json())
    elif isinstance(op, dict):
        d = op
    else:
        d = {"op": repr(op)}
    return d


def _op_text(op, limit: int = 600) -> str:
    text = json.dumps(_op_dict(op), separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


def anomaly_counts(result) -> dict[str, int]:
    """Kind -> how many (the checker's counts; its anomaly lists keep examples only)."""
    counts = getattr(result, "counts", None)
    if isinstance(counts, dict) and all(isinstance(v, int) for v in counts.values()):
        return {k: v for k, v in counts.items() if v}
    return {kind: len(items) for kind, items in (getattr(result, "anomalies", None) or {}).items() if items}


def _anomaly_html(result) -> str:
    anomalies = getattr(result, "anomalies", None) or {}
    if not any(anomalies.values()):
        return "<p>None.</p>"
    parts = []
    for kind in sorted(anomalies):
        items = anomalies[kind]
        if not items:
            continue
        allowed = all(getattr(a, "allowed", False) for a in items)
        bad = getattr(result, "bad_error_types", None)
        if bad is not None:
            allowed = kind not in bad
        note = " (allowed)" if allowed else ""
        total = anomaly_counts(result).get(kind, len(items))
        parts.append(f"<h3>{html.escape(kind)}: {total}{note}</h3>")
        for a in items[:EXAMPLES_PER_KIND]:
            desc = getattr(a, "description", None) or str(a)
            ops = list(getattr(a, "ops", None) or [])
            rows = "".join(f"<li><code>{html.escape(_op_text(op))}</code></li>" for op in ops[:OPS_PER_EXAMPLE])
            more = f"<li>... {len(ops) - OPS_PER_EXAMPLE} more</li>" if len(ops) > OPS_PER_EXAMPLE else ""
            parts.append(f"<div class=anomaly><p>{html.escape(str(desc))}</p><ul>{rows}{more}</ul></div>")
        if len(items) > EXAMPLES_PER_KIND:
            parts.append(f"<p>... and {len(items) - EXAMPLES_PER_KIND} more (see result.json)</p>")
    return "\n".join(parts)


def _bad(result) -> set[str] | None:
    bad = getattr(result, "bad_error_types", None)
    return set(bad) if bad is not None else None


def _table(d: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v, default=str))}</td></tr>"
                   for k, v in d.items())
    return f"<table>{rows}</table>"


STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}
.valid{color:#2a9d3f}.invalid{color:#d62728}code{font-size:12px;word-break:break-all}
.anomaly{border-left:3px solid #d62728;padding-left:8px;margin:6px 0}img{max-width:100%}"""


def render(result, history: list[Op], params: dict, stats: dict | None = None) -> str:
    pairs = completions(history)
    intervals = fault_intervals(history)
    counts = anomaly_counts(result)
    verdict = result.verdict_line() if hasattr(result, "verdict_line") else str(result)
    css = "valid" if getattr(result, "valid", False) else "invalid"
    checker_stats = getattr(result, "stats", None) or {}
    op_counts = getattr(result, "counts", None) or {}
    return f"""<!doctype html><html><head><meta charset=utf-8><title>kbroker-verify</title>
<style>{STYLE}</style></head><body>
<h1>kbroker-verify</h1>
<h2 class={css}>{html.escape(verdict)}</h2>
<h2>Run</h2>{_table(params)}
<h3>Measured</h3>{_table(stats or {})}
<h3>Checker</h3>{_table({"anomaly counts": op_counts, **checker_stats})}
<h3>Faults</h3>{_table({f"{f} @ {t0:.1f}s": f"{t1 - t0:.1f}s" for f, t0, t1 in intervals}) if intervals else "<p>none</p>"}
<h2>Throughput</h2><img src="data:image/png;base64,{throughput_plot(pairs, intervals)}">
<h2>Latency</h2><img src="data:image/png;base64,{latency_plot(pairs, intervals)}">
<h2>Anomalies</h2><img src="data:image/png;base64,{anomalies_plot(counts, _bad(result))}">
{_anomaly_html(result)}
</body></html>
"""


def write_report(path: str, result, history: list[Op], params: dict, stats: dict | None = None) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(result, history, params, stats))
