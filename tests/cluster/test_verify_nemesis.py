"""kbroker-verify's nemesis (tools/verify/nemesis.py) against the devcluster target.

One cluster for the module, made by ``make_target``: in network namespaces where they can be
made (root and iproute2), so that the partition fault runs too; on loopback otherwise (the
partition test is then skipped). Each fault is started once, its effect checked, stopped,
and the cluster must be healthy again (every etcd member up and answering, every broker up and
registered) within a bound. The cluster has three etcd members, one beside each broker: the
faults on one member (or one node) leave the other two a quorum, which the tests check by the
Raft leader they name.
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


def run_fault(target, name: str, check_started, actions: tuple[str, ...] | None = None) -> tuple[dict, dict]:
    (nemesis,) = make_nemeses([name], target)
    if actions is not None:
        nemesis.actions = actions  # the etcd faults' kill9 or pause, chosen here, not by the rng
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


def other_leader(target, member: int) -> bool:
    """Whether the members that are up name a leader, and not ``member``: they have a quorum
    without it (a killed, paused or cut leader is replaced after etcd's 1 s election timeout)."""
    return _poll(lambda: target.etcd_leader(5) not in (None, member), 15)


def test_partition(target):
    if "partition" not in target.capabilities:
        pytest.skip(f"partition needs network namespaces: {netns_unavailable()}")

    def check(started):
        cut = started["node"]
        assert not _listening(*target.broker_address(cut), timeout=1.0)
        # the node's etcd member runs in its namespace: cut with it, and said so
        member = target.cluster.etcd_members[cut]
        assert started["etcd_member"] == member.name and member.alive
        assert not target.etcd_member_up(cut) and not member.health(timeout=1.0)
        assert other_leader(target, cut)
        other = next(n for n in target.node_ids() if n != cut)
        # the cut broker's lease in etcd expires: the others stop listing it
        assert _poll(lambda: cut not in _metadata_brokers(*target.broker_address(other)),
                     target.session_timeout_s + 15), f"broker {cut} still registered while cut off"
    started, stopped = run_fault(target, "partition", check)
    assert stopped["etcd_member"] == started["etcd_member"] and stopped["etcd_healthy"], stopped


def test_machine(target):
    def check(started):
        node = started["node"]
        member = target.cluster.etcd_members[node]
        assert started["pid"] and started["etcd_member"] == member.name and started["etcd_pid"]
        # the whole node is down: its broker and its member
        assert not target.is_up(node) and not target.cluster.node(node).alive
        assert not member.alive and not target.etcd_member_up(node)
        assert other_leader(target, node)
    started, stopped = run_fault(target, "machine", check)
    node = started["node"]
    assert stopped["started"] and stopped["etcd_started"] and stopped["etcd_healthy"], stopped
    assert stopped["pid"] != started["pid"] and stopped["etcd_pid"] != started["etcd_pid"]
    assert target.cluster.etcd_members[node].alive and target.is_up(node)


def check_member_fault(target, started: dict, action: str) -> None:
    member_id = started["member"]
    member = target.cluster.etcd_members[member_id]
    assert started["action"] == action and started["etcd_member"] == member.name and started["pid"]
    assert member.alive == (action == "pause") and not target.etcd_member_up(member_id)
    assert not target.etcd_up()
    assert other_leader(target, member_id)


def check_member_back(target, started: dict, stopped: dict, action: str) -> None:
    assert stopped["member"] == started["member"] and stopped["healthy"], stopped
    if action == "pause":
        assert stopped["signal"] == "CONT" and stopped["paused_s"] >= target.session_timeout_s
    else:
        assert stopped["started"] and stopped["pid"] != started["pid"]
    assert target.etcd_member_up(started["member"])


@pytest.mark.parametrize("action", ["kill9", "pause"])
def test_etcd_member(target, action):
    started, stopped = run_fault(target, "etcd-member", lambda s: check_member_fault(target, s, action),
                                 actions=(action,))
    check_member_back(target, started, stopped, action)


@pytest.mark.parametrize("action", ["pause", "kill9"])
def test_etcd_leader(target, action):
    def check(started):
        # the member hit is the one the members named leader when the fault started
        assert isinstance(started["leader"], int) and started["leader"] == started["member"], started
        check_member_fault(target, started, action)
    started, stopped = run_fault(target, "etcd-leader", check, actions=(action,))
    check_member_back(target, started, stopped, action)


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
    for name in ("machine", "etcd-member", "etcd-leader"):
        with pytest.raises(ValueError, match=f"cannot do the {name} fault"):
            make_nemeses([name], external)


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
