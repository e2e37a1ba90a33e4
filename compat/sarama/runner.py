"""IBM/sarama (from the Go module proxy) against a target: ``main.go`` here, pinned by the
committed go.mod / go.sum. Its scenarios print ``PASS <name> (<ms> ms)`` or ``FAIL <name> (<ms>
ms): <error>``: plain, idempotent and compressed produce/consume, consumer groups (two members,
rebalance, commit, restart resumes; cooperative-sticky with static members and admin removal),
transactions read with read_committed (commit/abort, AddMessageToTxn, AddOffsetsToTxn), and
ClusterAdmin calls. Config.Version is Kafka 4.3.1 (sarama.MaxVersion); ``VERSIONS`` adds a run
at sarama's default version (2.8), whose ids get the ``v2.8/`` prefix.

On the secure targets (``SECURITY``) ``main.go`` gets the target's TLS / SCRAM settings as flags
(the password in ``COMPAT_SASL_PASSWORD``) and sets ``config.Net.TLS`` / ``config.Net.SASL`` (an
xdg-go/scram client generator) on every client's config.

``prepare`` builds the binary into ``~/.cache/kbroker/sarama-<version>`` (a no-op when the
sources are unchanged). Each run is bounded and its process group killed by pid on overrun.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import structlog

from compat.sources import go_build_stamp

log = structlog.get_logger("compat.sarama")

SUITE = "sarama"
VERSION = "v1.61.1"      # github.com/IBM/sarama; go.mod pins the same
BROKER_CONFIG: dict[str, str] = {"group.initial.rebalance.delay.ms": "0"}
FAST = False
SECURITY = ("sasl-ssl", "mtls")
VERSIONS = {"": "4.3.1", "v2.8/": "default"}
FEATURES = {
    "bootstrap": [r"admin_cluster"],
    "produce": [r"produce"],
    "consume": [r"produce", r"read_committed", r"delete_records"],
    "groups": [r"group"],
    "idempotence": [r"idempotent", r"txn_"],
    "transactions": [r"txn_"],
    "read_committed": [r"read_committed", r"txn_add_offsets"],
    "admin": [r"admin_"],
}
SCENARIOS = (
    "produce_consume", "idempotent_produce", "group_rebalance_commit_resume",
    "txn_commit_abort_read_committed", "txn_add_offsets_to_txn", "admin_topics", "admin_configs",
    "admin_create_partitions", "admin_delete_records", "admin_groups", "admin_delete_topic",
    "produce_compression", "group_cooperative_sticky_static", "admin_cluster_log_dirs",
    "admin_list_offsets", "admin_alter_group_offsets", "admin_elect_leaders_reassignments",
    "admin_acls", "admin_client_quotas", "admin_scram_credentials",
)
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"sarama-{VERSION}"
SCENARIO_TIMEOUT_S = 90
LINE = re.compile(r"^(PASS|FAIL) (\S+) \(\d+ ms\)(?:: (.*))?$")


def prepare() -> str:
    stamp = CACHE / ".stamp"
    if not stamp.exists() or stamp.read_text() != go_build_stamp(HERE):
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(CACHE / "saramacheck"), "."], cwd=HERE,
                       env={**os.environ, "GOFLAGS": "-mod=mod"}, check=True, timeout=600,
                       capture_output=True)
        stamp.write_text(go_build_stamp(HERE))
    go = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, timeout=30)
    return f"sarama {VERSION} ({go.stdout.strip()})"


def _bounded(cmd: list[str], timeout: float, log_path: Path, env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` (its own process group) at most ``timeout`` s; its stdout."""
    with open(log_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True, env=env)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.error("sarama_overran", pid=proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    return out


def security_args(security) -> tuple[list[str], dict[str, str]]:
    """``main.go``'s flags and environment for a target's ``ClientSecurity`` (none: PLAINTEXT)."""
    return security.go_flags() if security is not None else ([], {})


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    results: dict[str, str] = {}
    args, env = security_args(target.security)
    for prefix, version in VERSIONS.items():
        out = _bounded([str(CACHE / "saramacheck"), "-brokers", target.bootstrap,
                        "-nodes", str(target.nodes), "-version", version, *args],
                       SCENARIO_TIMEOUT_S * len(SCENARIOS) + 60,
                       workdir / f"sarama-{version}.log", env={**os.environ, **env})
        results.update({prefix + name: "failed" for name in SCENARIOS})
        for line in out.splitlines():
            m = LINE.match(line.strip())
            if m:
                results[prefix + m.group(2)] = "passed" if m.group(1) == "PASS" else "failed"
                if m.group(1) == "FAIL":
                    log.warning("sarama_scenario_failed", test=prefix + m.group(2), error=m.group(3))
    return results
