"""One three-node cluster (etcd + three broker processes) per test module."""

from __future__ import annotations

import pytest

from tests.support.cluster import restore, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("cluster")))
    yield c
    c.stop()


@pytest.fixture
def healthy(cluster):
    """The module's cluster with every node up, before and after the test."""
    restore(cluster)
    yield cluster
    restore(cluster)
