"""Python stream processors on kbroker, as CI runs them (``make compat`` runs them on every target,
Apache Kafka's included): Quix Streams' exactly-once application killed -9 four times in the
middle of its work, on three nodes (``make test``) and on one (``slow``: the same kills on a
single broker, which the three-node run already covers), must leave an exact output; Bytewax's
Kafka connectors must read, transform and write every record."""

import pytest

from compat.run import run_one
from tests.support.cluster import require_etcd


@pytest.mark.compat
@pytest.mark.parametrize("target", [pytest.param("kbroker", marks=pytest.mark.slow), "kbroker-cluster"])
def test_quix_streams_stays_exactly_once_under_kill9(target):
    if target.endswith("cluster"):
        require_etcd()
    assert run_one("quixstreams", target, fast=True) == []


@pytest.mark.compat
def test_bytewax_reads_transforms_and_writes():
    assert run_one("bytewax", "kbroker", fast=True) == []
