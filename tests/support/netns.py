"""Network namespaces for partition tests: each broker on its own host behind a veth pair.

The topology lives in :mod:`tools.verify.targets` (kbroker-verify's ``devcluster:netns``
target uses it too); this module keeps the names the cluster tests use.

Topology: a bridge in the root namespace (the address etcd and the test clients use) and, per
broker, a namespace whose veth peer is attached to the bridge. Cutting a broker off sets its
bridge-side link down: it can reach neither etcd nor the other brokers, and only a client
inside its own namespace can reach it. Needs root and iproute2 (``ip``).
"""

from __future__ import annotations

from tools.verify.targets import Topology, _ip
from tools.verify.targets import netns_unavailable as available

__all__ = ["Topology", "_ip", "available"]
