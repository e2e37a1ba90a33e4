"""kbroker inside other projects' tests: a real broker process, started and stopped for them.

This package is the only import name kbroker installs for its users. The broker itself
(``broker``, ``protocol``, ``storage``, ``coordinator``, ``security``, ``tools``, ``pipeline``)
runs in its own processes from :func:`kbroker.layout.app_root`, so that a project with its own
``tools`` or ``storage`` package neither shadows kbroker's nor is shadowed by it.

- :class:`EmbeddedBroker`: one broker, ``with EmbeddedBroker() as b: b.bootstrap_servers``.
- :class:`EmbeddedCluster`: three nodes (a broker and an etcd member each), for failover tests.
- ``kbroker.pytest_plugin``: the ``kafka_broker``, ``kafka_topic``, ``kafka_topic_factory`` and
  ``kafka_cluster`` fixtures (registered through the ``pytest11`` entry point).
"""

from __future__ import annotations

from .embedded import BrokerStartError, EmbeddedBroker

__all__ = ["BrokerStartError", "EmbeddedBroker", "EmbeddedCluster"]


def __getattr__(name: str):
    if name == "EmbeddedCluster":  # imported on use: it loads the cluster launcher
        from .cluster import EmbeddedCluster

        return EmbeddedCluster
    raise AttributeError(name)
