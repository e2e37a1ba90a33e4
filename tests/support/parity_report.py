"""The parity table (``make parity``): the same modules run against kbroker and against Apache
Kafka 4.3.1, side by side, from the two runs' JUnit XML files.

A test's two runs are matched by module and name, with the target's own parameter id dropped
(``test_x[kbroker-default]`` and ``test_x[kafka-default]`` are one row); the table counts each
module's outcomes per target and lists every test whose outcome differs, with the first line
of its failure, skip or xfail reason (an xfail marks what a target is known to fall short of).

``python -m tests.support.parity_report KBROKER.xml KAFKA.xml DOC.md``
"""

from __future__ import annotations

import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

START, END = "<!-- parity:start -->", "<!-- parity:end -->"
OUTCOMES = ("passed", "failed", "skipped", "xfailed")  # xfailed: a known shortfall of that target
TARGET_ID = re.compile(r"(?<=\[)(kbroker|kafka)-?|-?(kbroker|kafka)(?=\])")


def outcomes(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(module, test) -> (outcome, first line of its message) for every test case in ``path``."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").removeprefix("tests.")
        name = TARGET_ID.sub("", case.get("name", "")).replace("[]", "")
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            child = case.find(kind)
            if child is not None:
                outcome = "failed" if kind in ("failure", "error") else \
                    "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                message = (child.get("message") or child.text or "").strip().splitlines()[:1]
                message = message[0][:160] if message else ""
                break
        out[(module, name)] = (outcome, message)
    return out


def _counts(results: dict, module: str) -> str:
    c = Counter(o for (m, _), (o, _) in results.items() if m == module)
    if not c:
        return "not run"
    return ", ".join(f"{c[k]} {k}" for k in OUTCOMES if c[k])


def render(ours: dict, kafka: dict) -> str:
    modules = sorted({m for m, _ in ours} | {m for m, _ in kafka})
    lines = ["| module | kbroker | Apache Kafka 4.3.1 |", "|---|---|---|"]
    lines += [f"| `{m}` | {_counts(ours, m)} | {_counts(kafka, m)} |" for m in modules]
    differ = defaultdict(list)
    for key in sorted(set(ours) | set(kafka)):
        a, b = ours.get(key, ("not run", "")), kafka.get(key, ("not run", ""))
        if a[0] != b[0]:
            differ[key[0]].append((key[1], a, b))
    total = lambda r: Counter(o for o, _ in r.values())  # noqa: E731
    to, tk = total(ours), total(kafka)
    in_all = lambda c: ", ".join(f"{c[k]} {k}" for k in OUTCOMES)  # noqa: E731
    lines += ["", f"In all: kbroker {in_all(to)}; Apache Kafka {in_all(tk)}."]
    if differ:
        lines += ["", "Tests whose outcome differs:", ""]
        for module, rows in differ.items():
            for name, a, b in rows:
                why = "; ".join(f"{t}: {m}" for t, (o, m) in (("kbroker", a), ("Kafka", b)) if m)
                lines.append(f"- `{module}::{name}`: kbroker {a[0]}, Kafka {b[0]}" + (f" ({why})" if why else ""))
    else:
        lines += ["", "Every test has the same outcome on both."]
    lines += ["", f"Last run: {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC (`make parity`)."]
    return "\n".join(lines) + "\n"


def write_doc(doc: Path, table: str) -> None:
    text = doc.read_text() if doc.exists() else f"# Parity with Apache Kafka 4.3.1\n\n{START}\n{END}\n"
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{START}\n{table}{END}{tail}")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    ours, kafka, doc = (Path(a) for a in argv)
    missing = [str(p) for p in (ours, kafka) if not p.exists()]
    if missing:
        print(f"parity_report: no results in {', '.join(missing)} (did the run start?)", file=sys.stderr)
        return 2
    write_doc(doc, render(outcomes(ours), outcomes(kafka)))
    print(f"parity table written to {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
