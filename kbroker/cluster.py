"""``EmbeddedCluster``: N kbroker nodes (a broker and an etcd member each), for tests of failover
in the user's own code.

    with EmbeddedCluster(nodes=3) as cluster:
        topic = cluster.create_topic(partitions=3)          # replication factor 3
        cluster.kill(2)                                     # kill -9 broker 2
        cluster.kill_etcd_member(2)                         # and the etcd member beside it
        ...
        cluster.start_etcd_member(2)
        cluster.start_broker(2)

It is the repository's cluster launcher (``tools/devcluster.py``) run from kbroker's own packages:
that module is loaded from its file under a private name, so nothing called ``tools`` is
imported into the caller's process. Needs Debian's ``etcd`` (package ``etcd-server``) on PATH.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import process
from .admin import TopicAdmin
from .embedded import TEST_DEFAULTS, BrokerStartError
from .layout import app_root

_LAUNCHER = "kbroker._devcluster"


def _launcher():
    if _LAUNCHER in sys.modules:
        return sys.modules[_LAUNCHER]
    spec = importlib.util.spec_from_file_location(_LAUNCHER, app_root() / "tools" / "devcluster.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_LAUNCHER] = module
    spec.loader.exec_module(module)
    return module


class EmbeddedCluster(TopicAdmin):
    default_replication_factor = 3

    def __init__(self, nodes: int = 3, config: dict[str, object] | None = None, *,
                 data_dir: str | os.PathLike | None = None, keep_data: bool = False,
                 start_timeout: float = 90.0, etcd_members: int | None = None) -> None:
        """``etcd_members``: default one per node (at most 5), so losing one node loses one
        member only; 1 starts faster and is a single point of failure."""
        launcher = _launcher()
        if launcher.etcd_binary() is None:
            raise BrokerStartError("EmbeddedCluster needs etcd on PATH (Debian/Ubuntu: apt-get install "
                                   "etcd-server; elsewhere: https://etcd.io/docs/latest/install/)")
        self._own_dir = data_dir is None
        self.dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kbroker-cluster-"))
        self.keep_data = keep_data
        self.start_timeout = start_timeout
        self.default_replication_factor = min(3, nodes)
        overrides = {**TEST_DEFAULTS, **{k: str(v) for k, v in (config or {}).items()}}
        self._cluster = launcher.DevCluster(str(self.dir), nodes, overrides=overrides, etcd_members=etcd_members)
        self._cluster.die_with_parent = True  # a test run killed outright leaves nothing behind

    @property
    def bootstrap_servers(self) -> str:
        return self._cluster.bootstrap

    bootstrap = bootstrap_servers

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._cluster.nodes)

    def pid(self, node_id: int) -> int | None:
        node = self._cluster.node(node_id)
        return node.proc.pid if node.alive else None

    @property
    def etcd_pids(self) -> dict[int, int]:
        """The pid of each running etcd member, by member id (one member beside each node)."""
        return {i: m.proc.pid for i, m in self._cluster.etcd_members.items() if m.alive}

    @property
    def etcd_endpoints(self) -> str:
        """Every etcd member's client address (``metadata.etcd.endpoints``)."""
        return self._cluster.etcd_endpoints

    def alive(self, node_id: int) -> bool:
        return self._cluster.node(node_id).alive

    def address(self, node_id: int) -> str:
        return self._cluster.node(node_id).address

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> EmbeddedCluster:
        try:
            self._cluster.start(self.start_timeout)
        except (RuntimeError, TimeoutError) as exc:
            tails = "\n".join(f"--- broker {i}:\n{self.log_tail(i, max_lines=30)}" for i in self.node_ids)
            self._cluster.kill()
            raise BrokerStartError(f"{exc}; logs in {self.dir}\n{tails}") from None
        return self

    def close(self) -> None:
        for node_id in self.node_ids:  # a paused broker cannot shut down
            self.resume(node_id)
        self._cluster.stop()
        if self._own_dir and not self.keep_data and not os.environ.get("KBROKER_KEEP_DATA"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and hasattr(exc, "add_note"):
            for i in self.node_ids:
                exc.add_note(f"kbroker broker {i} log:\n{self.log_tail(i, max_lines=40)}")
        self.close()

    # --- faults on one broker -------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """kill -9 one broker; it stays down until :meth:`start_broker`."""
        self._cluster.node(node_id).kill9()

    def stop_broker(self, node_id: int) -> None:
        """Controlled shutdown of one broker (SIGTERM)."""
        self._cluster.node(node_id).stop()

    def start_broker(self, node_id: int, wait: bool = True) -> None:
        """Start a stopped or killed broker again on its port and data; with ``wait``, until it has
        registered with the cluster again."""
        node = self._cluster.node(node_id)
        if not node.alive:
            node.start(wait=wait, timeout=self.start_timeout)
        if wait:
            self._cluster.wait_registered({node_id}, self.start_timeout)

    def restart_broker(self, node_id: int, kill: bool = False) -> None:
        self.kill(node_id) if kill else self.stop_broker(node_id)
        self.start_broker(node_id)

    def kill_etcd_member(self, member_id: int) -> None:
        """kill -9 one etcd member; the brokers move to the others while a majority remains."""
        self._cluster.etcd_members[member_id].kill9()

    def start_etcd_member(self, member_id: int) -> None:
        """Start a killed etcd member again on its data; it rejoins the cluster as itself."""
        member = self._cluster.etcd_members[member_id]
        if not member.alive:
            member.start(timeout=self.start_timeout)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the broker holds its connections and answers nothing (a long GC pause)."""
        self._cluster.node(node_id).pause()

    def resume(self, node_id: int) -> None:
        self._cluster.node(node_id).resume()

    def log_path(self, node_id: int) -> Path:
        return Path(self._cluster.node(node_id).log_path)

    def log_tail(self, node_id: int, since: int = 0, max_lines: int = 80) -> str:
        return process.log_tail(self.log_path(node_id), since, max_lines)

    def __repr__(self) -> str:
        return f"EmbeddedCluster({self.bootstrap_servers})"
