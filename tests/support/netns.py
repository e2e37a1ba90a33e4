"""Network namespaces for partition tests: each broker on its own host behind a veth pair.

Topology: a bridge in the root namespace (the address etcd and the test clients use) and, per
broker, a namespace whose veth peer is attached to the bridge. Cutting a broker off sets its
bridge-side link down: it can reach neither etcd nor the other brokers, and only a client
inside its own namespace can reach it. Needs root and iproute2 (``ip``).

Where dockerd runs (``make compose-up``, tests/compose), the FORWARD chain's policy is DROP and
bridged frames pass through iptables (br_netfilter): the topology accepts its own bridge's
traffic first, and takes that rule away with the bridge.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


class Topology:
    def __init__(self, nodes: int, subnet: int | None = None) -> None:
        self.tag = f"{os.getpid() % 10000:04d}"
        self.subnet = subnet if subnet is not None else 100 + os.getpid() % 100
        self.bridge = f"kbbr{self.tag}"
        self.host_ip = f"10.213.{self.subnet}.1"
        self.node_ids = list(range(1, nodes + 1))

    def netns(self, node_id: int) -> str:
        return f"kbns{self.tag}n{node_id}"

    def host_link(self, node_id: int) -> str:
        return f"kbv{self.tag}h{node_id}"

    def node_ip(self, node_id: int) -> str:
        return f"10.213.{self.subnet}.{10 + node_id}"

    def prefix(self, node_id: int) -> list[str]:
        return ["ip", "netns", "exec", self.netns(node_id)]

    def create(self) -> Topology:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self._forwarding("-I")
        for n in self.node_ids:
            ns, host, peer = self.netns(n), self.host_link(n), f"kbv{self.tag}n{n}"
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("link", "set", host, "master", self.bridge, "up")
            _ip("addr", "add", f"{self.node_ip(n)}/24", "dev", peer, netns=ns)
            _ip("link", "set", peer, "up", netns=ns)
            _ip("link", "set", "lo", "up", netns=ns)
        return self

    def _forwarding(self, action: str) -> None:
        """Insert (-I) or delete (-D) the FORWARD rule that accepts this bridge's own traffic."""
        if shutil.which("iptables") is not None:
            subprocess.run(["iptables", action, "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"],
                           capture_output=True, timeout=10)

    def cut(self, node_id: int) -> None:
        _ip("link", "set", self.host_link(node_id), "down")

    def heal(self, node_id: int) -> None:
        _ip("link", "set", self.host_link(node_id), "up")

    def destroy(self) -> None:
        for n in self.node_ids:
            subprocess.run(["ip", "netns", "del", self.netns(n)], capture_output=True, timeout=10)
            subprocess.run(["ip", "link", "del", self.host_link(n)], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
        self._forwarding("-D")
