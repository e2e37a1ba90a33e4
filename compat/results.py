"""Results of compatibility runs: one JSON per suite and target, allowlists, feature cells.

A suite's runner returns ``{test id: outcome}`` (outcome one of ``passed``, ``failed``,
``skipped``). :func:`record` stores it as ``compat/results/<suite>/<target>.json`` with the
client's version, and :func:`regressions` compares a kbroker run with the suite's allowlist:
``compat/<suite>/allowlist.txt`` (one node) and ``allowlist-cluster.txt`` (three nodes), one
test id per line, ``#`` comments. A listed test that did not pass is a regression; a test that
fails and is not listed must have its reason in the suite's ``FINDINGS.md``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

COMPAT = Path(__file__).resolve().parent
RESULTS = COMPAT / "results"

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
FEATURES = ("bootstrap", "produce", "consume", "groups", "idempotence", "transactions",
            "read_committed", "admin")


@dataclass
class SuiteResult:
    suite: str
    target: str
    client: str                      # the client or tool and its version, e.g. "librdkafka 2.12.1"
    tests: dict[str, str]
    features: dict[str, list[str]] = field(default_factory=dict)  # feature -> test ids
    duration_s: float = 0.0
    finished: str = ""

    def count(self, outcome: str, ids=None) -> int:
        return sum(1 for t in (self.tests if ids is None else ids) if self.tests.get(t) == outcome)

    @property
    def passed(self) -> int:
        return self.count(PASSED)

    @property
    def failed(self) -> int:
        return self.count(FAILED)


def classify(tests: dict[str, str], patterns: dict[str, list[str]]) -> dict[str, list[str]]:
    """Feature -> the test ids whose id matches one of the feature's regexes."""
    return {feature: sorted(t for t in tests if any(re.search(p, t) for p in regexes))
            for feature, regexes in patterns.items()}


def record(suite: str, target: str, client: str, tests: dict[str, str],
           features: dict[str, list[str]], duration_s: float, save: bool = True) -> SuiteResult:
    """The run as a result; ``save`` stores it for the matrix (fast CI runs do not)."""
    result = SuiteResult(suite, target, client, dict(sorted(tests.items())),
                         {f: ids for f, ids in features.items() if ids}, round(duration_s, 1),
                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if not save:
        return result
    path = RESULTS / suite / f"{target}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=1) + "\n")
    return result


def load_all() -> list[SuiteResult]:
    return [SuiteResult(**json.loads(p.read_text())) for p in sorted(RESULTS.glob("*/*.json"))]


def allowlist(suite_dir: Path, target: str) -> set[str]:
    """The tests a kbroker ``target`` must pass: ``allowlist-cluster.txt`` on three nodes,
    ``allowlist-<mode>.txt`` on a secure target where a suite has one, else ``allowlist.txt``."""
    name = "allowlist-cluster.txt" if target.endswith("-cluster") else "allowlist.txt"
    mode = target.split("-", 1)[1] if "-" in target else ""
    if mode in ("sasl-ssl", "mtls") and (suite_dir / f"allowlist-{mode}.txt").exists():
        name = f"allowlist-{mode}.txt"
    path = suite_dir / name
    if not path.exists():
        return set()
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def regressions(result: SuiteResult, expected: set[str]) -> list[str]:
    """Allowlisted tests that did not pass (missing from the run counts as not passing)."""
    return sorted(t for t in expected if result.tests.get(t) != PASSED)
