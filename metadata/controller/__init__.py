"""The controller side of cluster metadata: decisions, placement, and the control managers.

Every broker writes cluster metadata through these managers (Kafka's brokers forward the same
requests to the active controller's): :mod:`.replication` (topics and partitions),
:mod:`.features`, :mod:`.client_quotas`, :mod:`.acls`, :mod:`.scram`, :mod:`.producer_ids`, and
:mod:`.managers` (configs, broker registrations, and the bundle a broker holds). The active
controller's own loop is :mod:`.controller`, its decisions :mod:`.partition_change` and
:mod:`.placement`.
"""

from __future__ import annotations

import inspect


async def settled(result):
    """A store write's result: awaited from the etcd store, as returned by the embedded one
    (whose writes are done, logged and fsynced, when they return)."""
    return await result if inspect.isawaitable(result) else result
