"""bench/cpu_profile.py's reading of py-spy's collapsed stacks: samples per function, inclusive
(once per stack) and self (at its top), the event loop's own frames left out, paths made
relative."""

from __future__ import annotations

import importlib.util

from tests.support.broker_process import REPO

spec = importlib.util.spec_from_file_location("cpu_profile", REPO / "bench" / "cpu_profile.py")
cpu_profile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cpu_profile)

LOOP = ("_run_module_as_main (<frozen runpy>:198);main (broker/__main__.py:57);"
        "Runner.run (/usr/lib/python3.11/asyncio/runners.py:118)")
COLLAPSED = f"""\
{LOOP} 10
{LOOP};ReplicaManager.shrink_isr_pass ({REPO}/broker/replica_manager.py:444);Partition.lagging_replicas ({REPO}/broker/partition.py:90) 30
{LOOP};ReplicaManager.shrink_isr_pass ({REPO}/broker/replica_manager.py:446) 10
{LOOP};Call.result (/venv/lib/python3.11/site-packages/grpc/aio/_call.py:300);Call.result (/venv/lib/python3.11/site-packages/grpc/aio/_call.py:310) 50
"""


def test_samples_are_counted_per_function_inclusive_and_self():
    s = cpu_profile.summarize(COLLAPSED, seconds=10, rate=10)
    assert s["samples"] == 100 and s["busy_cores"] == 1.0
    inclusive = {r["function"]: r["samples"] for r in s["inclusive"]}
    assert inclusive == {"Call.result (grpc/aio/_call.py)": 50,  # recursion counted once per stack
                         "ReplicaManager.shrink_isr_pass (broker/replica_manager.py)": 40,
                         "Partition.lagging_replicas (broker/partition.py)": 30}
    top = {r["function"]: r["share"] for r in s["self"]}
    assert top["Runner.run (stdlib/asyncio/runners.py)"] == 0.1
    assert top["ReplicaManager.shrink_isr_pass (broker/replica_manager.py)"] == 0.1
    assert "40.0%  ReplicaManager.shrink_isr_pass" in cpu_profile.render("node1", s)


def test_the_periodic_passes_are_counted_each_however_few_their_samples():
    collapsed = (f"{LOOP};Broker._periodic ({REPO}/broker/broker.py:420);Broker._isr_pass ({REPO}/broker/broker.py:460);"
                 f"ReplicaManager.shrink_isr_pass ({REPO}/broker/replica_manager.py:444) 2\n"
                 f"{LOOP};Broker._periodic ({REPO}/broker/broker.py:420);Broker._flush_pass ({REPO}/broker/broker.py:450) 1\n"
                 f"{LOOP} 97\n")
    s = cpu_profile.summarize(collapsed, seconds=10, rate=10, top=1)
    assert s["passes"] == {"Broker._flush_pass": {"samples": 1, "cores": 0.01},
                           "Broker._isr_pass": {"samples": 2, "cores": 0.02}}
