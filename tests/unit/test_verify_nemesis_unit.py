"""kbroker-verify's nemesis without a cluster: which member or node a fault picks, what its
history entry says, how it is undone, and which targets refuse which faults (one line)."""

from __future__ import annotations

import random

import pytest

from tools.verify import matrix
from tools.verify.nemesis import EtcdLeader, EtcdMember, Machine, capability, make_nemeses
from tools.verify.runner import _base
from tools.verify.targets import ALL_FAULTS, COMPOSE_FAULTS, KAFKA_FAULTS, Target, spec_capabilities


class FakeTarget(Target):
    """Three nodes and three etcd members; records the primitives called."""

    name = "devcluster"
    capabilities = ALL_FAULTS

    def __init__(self, leader: int | None = 2, down: set[int] = frozenset()) -> None:
        super().__init__("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
        self.leader, self.down = leader, set(down)
        self.calls: list[tuple[str, int]] = []

    @property
    def session_timeout_s(self) -> float:
        return 0.05

    def is_up(self, node_id):
        return node_id not in self.down

    def etcd_member_ids(self):
        return [1, 2, 3]

    def etcd_member_up(self, member_id):
        return member_id not in self.down

    def etcd_leader(self, timeout=10.0):
        return self.leader

    def _did(self, what: str, n: int, **more) -> dict:
        self.calls.append((what, n))
        return {"member" if "etcd" in what else "node": n, **more}

    def kill_etcd_member(self, m):
        return self._did("kill_etcd_member", m, signal="KILL")

    def pause_etcd_member(self, m):
        return self._did("pause_etcd_member", m, signal="STOP")

    def resume_etcd_member(self, m):
        return self._did("resume_etcd_member", m, signal="CONT")

    def restart_etcd_member(self, m):
        return self._did("restart_etcd_member", m, started=True)

    def kill_machine(self, n):
        return self._did("kill_machine", n, etcd_member=f"etcd-{n}")

    def restart_machine(self, n):
        return self._did("restart_machine", n, started=True)


def test_capability_of_each_fault_name():
    assert [capability(n) for n in ("proxy-delay", "coordinator-pause", "etcd-member", "etcd-leader",
                                    "machine", "etcd")] == ["proxy", "coordinator", "etcd-member",
                                                            "etcd-leader", "machine", "etcd"]
    # the runner's check uses the same names: etcd-member is not the etcd (whole store) capability
    assert _base("etcd-member") == "etcd-member" and _base("proxy-reorder") == "proxy"
    assert _base("client-kill") == "client-kill"


def test_targets_can_do_the_node_and_member_faults_where_they_have_them():
    assert {"machine", "etcd-member", "etcd-leader"} <= ALL_FAULTS
    assert "machine" in KAFKA_FAULTS and not {"etcd", "etcd-member", "etcd-leader"} & KAFKA_FAULTS
    assert {"machine", "etcd-member"} <= COMPOSE_FAULTS and "etcd-leader" not in COMPOSE_FAULTS
    assert "partition" in spec_capabilities("kafka") and spec_capabilities("10.0.0.1:9092") is None


@pytest.mark.parametrize("name", ["etcd-member", "etcd-leader", "etcd"])
def test_kafka_refuses_the_etcd_faults_in_one_line(name):
    target = FakeTarget()
    target.name, target.capabilities = "kafka", KAFKA_FAULTS
    with pytest.raises(ValueError) as err:
        make_nemeses([name], target)
    message = str(err.value)
    assert "\n" not in message and f"target kafka cannot do the {name} fault" in message
    assert "kill9 or machine covers it" in message
    (machine,) = make_nemeses(["machine"], target)
    assert isinstance(machine, Machine)


def test_machine_kills_and_restarts_one_node_that_is_up():
    target = FakeTarget(down={1, 3})
    (nemesis,) = make_nemeses(["machine"], target)
    started = nemesis.start(random.Random(0))
    assert started == {"phase": "start", "node": 2, "etcd_member": "etcd-2"}
    assert nemesis.stop() == {"phase": "stop", "node": 2, "started": True}
    assert target.calls == [("kill_machine", 2), ("restart_machine", 2)]


def test_etcd_member_picks_a_member_that_is_up_and_records_the_action():
    target = FakeTarget(down={2})
    seen = set()
    for seed in range(20):
        nemesis = EtcdMember(target)
        started = nemesis.start(random.Random(seed))
        assert started["member"] in (1, 3) and started["action"] in ("kill9", "pause")
        assert ("hold_s" in started) == (started["action"] == "pause")
        nemesis.started_at -= started.get("hold_s", 0)  # held already: stop() does not sleep
        stopped = nemesis.stop()
        undo = "resume_etcd_member" if started["action"] == "pause" else "restart_etcd_member"
        assert target.calls[-1] == (undo, started["member"]) and stopped["member"] == started["member"]
        seen.add(started["action"])
    assert seen == {"kill9", "pause"}, "both actions are drawn"


def test_a_paused_member_is_held_past_the_session_timeout():
    target = FakeTarget()
    nemesis = EtcdMember(target)
    nemesis.actions = ("pause",)
    started = nemesis.start(random.Random(1))
    assert started["signal"] == "STOP" and started["hold_s"] == pytest.approx(target.session_timeout_s + 1.0)
    nemesis.started_at -= started["hold_s"]  # as if held already: stop() does not sleep
    assert nemesis.stop()["signal"] == "CONT"


def test_etcd_leader_hits_the_leader_or_says_it_found_none():
    target = FakeTarget(leader=3)
    nemesis = EtcdLeader(target)
    nemesis.actions = ("kill9",)
    started = nemesis.start(random.Random(5))
    assert started["leader"] == started["member"] == 3 and target.calls == [("kill_etcd_member", 3)]
    nemesis.stop()
    target.leader = None
    started = nemesis.start(random.Random(5))
    assert started["leader"] == "not found: a random member" and started["member"] in (1, 2, 3)


def test_the_matrix_marks_cells_a_target_cannot_do_na():
    assert matrix.applicable("devcluster", "etcd-leader") and matrix.applicable("kafka", "machine")
    assert not matrix.applicable("kafka", "etcd-member")
    assert matrix.applicable("kafka", "kill9,pause,term,client-kill") and matrix.applicable("kafka", "none")
    assert {"machine", "etcd-member", "etcd-leader"} <= set(matrix.FAULTS)
    ran = {matrix.cell_key("devcluster", "txn", "etcd-member"): [
        {"valid": True, "records": 9, "txn_records": 9, "seconds": 9, "when": "2026-12-07 10:00"}]}
    table = matrix.render(ran, kept={matrix.cell_key("kafka", "txn", "machine"): "not run"})
    rows = [line for line in table.splitlines() if line.startswith("| txn")]
    assert rows == ["| txn | `machine` | not run | not run |",
                    "| txn | `etcd-member` | **valid**: 9 committed in 9 s (1/s) | n/a |"]


def test_compose_node_and_member_faults_are_docker_commands(monkeypatch, tmp_path):
    """The compose target's machine and etcd-member primitives, with ``docker`` recorded (no daemon)."""
    from tools.verify import targets

    calls: list[tuple[str, ...]] = []
    down: set[str] = set()  # containers killed and not started again

    def docker(*args, timeout=60.0, check=True):
        calls.append(args)
        if args[0] == "ps":  # -a: every container; without: running ones
            cid = "id-" + next(a for a in args if "compose.service=" in a).split("=")[-1]
            return cid if "-a" in args or cid not in down else ""
        if args[0] == "kill":
            down.add(args[-1])
        if args[0] == "start":
            down.discard(args[-1])
        return "healthy" if args[0] == "inspect" else ""

    monkeypatch.setattr(targets, "docker_unavailable", lambda: None)
    monkeypatch.setattr(targets, "_docker", docker)
    monkeypatch.setattr(targets, "_metadata_brokers", lambda host, port: [1, 2, 3])
    compose = targets.ComposeTarget(str(tmp_path))
    assert "etcd-member" in compose.capabilities and "etcd-leader" not in compose.capabilities

    def commands():
        out = [c for c in calls if c[0] in ("kill", "start", "pause", "unpause")]
        calls.clear()
        return out

    started = compose.kill_machine(2)
    assert started["etcd_member"] == "etcd2" and started["container"] == "id-broker2"
    assert commands() == [("kill", "-s", "KILL", "id-etcd2"), ("kill", "-s", "KILL", "id-broker2")]
    stopped = compose.restart_machine(2)
    assert stopped["etcd_healthy"] and stopped["started"]
    assert commands() == [("start", "id-etcd2"), ("start", "id-broker2")], "the member first"

    assert compose.pause_etcd_member(3)["signal"] == "freeze" and not compose.etcd_member_up(3)
    assert compose.restart_etcd_member(3)["started"] is False and compose.etcd_member_up(3)
    assert commands() == [("pause", "id-etcd3"), ("unpause", "id-etcd3")]
