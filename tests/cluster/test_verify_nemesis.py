"""kbroker-verify's nemesis (tools/verify/nemesis.py) against the devcluster target.

One cluster for the module, made by ``make_target``: in network namespaces where they can be
made (root and iproute2), so that the partition fault runs too; on loopback otherwise (the
partition test is then skipped). Each fault is started once, its effect checked, stopped,
and the cluster must be healthy again (every broker up and registered) within a bound.
"""

from __future__ import annotations

import random

import pytest

from tools.verify.nemesis import heal_all, make_nemeses
from tools.verify.targets import _listening, _metadata_brokers, _poll, make_target, netns_unavailable

pytestmark = pytest.mark.cluster

HEALTHY_WITHIN = 60.0


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from tests.support.cluster import require_etcd

    require_etcd()
    faults = ["partition"] if netns_unavailable() is None else []
    t = make_target("devcluster", str(tmp_path_factory.mktemp("verify-nemesis")), faults=faults)
    t.start()
    try:
        assert t.wait_healthy(HEALTHY_WITHIN)
        yield t
    finally:
        t.stop()
        t.stop()  # safe twice


def run_fault(target, name: str, check_started) -> tuple[dict, dict]:
    (nemesis,) = make_nemeses([name], target)
    try:
        started = nemesis.start(random.Random(1))
        assert started["phase"] == "start"
        check_started(started)
        stopped = nemesis.stop()
        assert stopped["phase"] == "stop"
    finally:
        heal_all([nemesis])
    assert target.wait_healthy(HEALTHY_WITHIN), f"unhealthy after {name}: {target.logs()}"
    return started, stopped


def test_kill9(target):
    def check(started):
        assert started["pid"] and not target.is_up(started["node"])
    _, stopped = run_fault(target, "kill9", check)
    assert stopped["started"]


def test_pause(target):
    def check(started):
        assert started["signal"] == "STOP" and not target.is_up(started["node"])
    started, stopped = run_fault(target, "pause", check)
    assert stopped["paused_s"] >= target.session_timeout_s


def test_term(target):
    def check(started):
        assert started["exit"] == 0, "a controlled shutdown exits 0"
        assert not target.is_up(started["node"])
    run_fault(target, "term", check)


def test_etcd(target):
    def check(started):
        assert started["etcd_pids"] and not target.etcd_up()
    _, stopped = run_fault(target, "etcd", check)
    assert stopped["started"]


def test_partition(target):
    if "partition" not in target.capabilities:
        pytest.skip(f"partition needs network namespaces: {netns_unavailable()}")

    def check(started):
        cut = started["node"]
        assert not _listening(*target.broker_address(cut), timeout=1.0)
        other = next(n for n in target.node_ids() if n != cut)
        # the cut broker's lease in etcd expires: the others stop listing it
        assert _poll(lambda: cut not in _metadata_brokers(*target.broker_address(other)),
                     target.session_timeout_s + 15), f"broker {cut} still registered while cut off"
    run_fault(target, "partition", check)


def test_coordinator_kill(target):
    (nemesis,) = make_nemeses(["coordinator"], target, coordinator_keys={"group": ["verify-g"]})
    nemesis.find_timeout_s = 30.0
    try:
        started = nemesis.start(random.Random(2))
        assert started["key"] == "verify-g" and started.get("node"), started
        assert not target.is_up(started["node"])
        nemesis.stop()
    finally:
        heal_all([nemesis])
    assert target.wait_healthy(HEALTHY_WITHIN)


def test_unknown_or_unsupported_faults(target):
    with pytest.raises(ValueError, match="unknown fault"):
        make_nemeses(["flood"], target)
    with pytest.raises(ValueError, match="needs the proxy"):
        make_nemeses(["proxy-delay"], target)
    external = make_target("127.0.0.1:1", "unused")
    with pytest.raises(ValueError, match="cannot do the kill9 fault"):
        make_nemeses(["kill9"], external)


def test_proxy_modes(target):
    from tools.verify.proxy import KafkaProxy

    proxy = KafkaProxy.for_target(target).start()
    try:
        nemeses = make_nemeses(["proxy", "proxy-reorder"], target, proxy=proxy)
        for nemesis in nemeses:
            started = nemesis.start(random.Random(4))
            assert proxy.mode.name == started["mode"] != "normal"
            assert nemesis.stop()["mode"] == "normal" and proxy.mode.name == "normal"
        with pytest.raises(ValueError, match="unknown proxy fault"):
            make_nemeses(["proxy-flood"], target, proxy=proxy)
    finally:
        proxy.stop()
