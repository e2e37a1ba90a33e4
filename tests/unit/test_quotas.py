"""Byte-rate quotas (broker/quotas.py) on a fake clock: which stored quota applies to a client,
Kafka's windowed rate (at least ten seconds' worth before a fresh client is throttled), the
throttle time and its cap, and the bytes a throttled fetch gives back."""

from __future__ import annotations

import pytest

from broker.quotas import FETCH, PRODUCE, WINDOW_S, WINDOWS, ClientQuotaManager, user_name
from metadata.controller.client_quotas import entity_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager(quotas: dict, kind: str = PRODUCE) -> tuple[ClientQuotaManager, Clock]:
    clock = Clock()
    stored = {entity_key(tuple(e)): q for e, q in quotas.items()}
    return ClientQuotaManager(kind, lambda: stored, clock), clock


U, C = "user", "client-id"


@pytest.mark.parametrize("user, client, expected", [
    ("alice", "app", 1.0),     # user and client-id
    ("alice", "other", 2.0),   # user and the default client-id
    ("bob", "app", 4.0),       # the default user and client-id
    ("bob", "other", 5.0),     # the default user and the default client-id
])
def test_the_most_specific_quota_applies(user, client, expected):
    m, _ = manager({((U, "alice"), (C, "app")): {PRODUCE: 1.0}, ((U, "alice"), (C, None)): {PRODUCE: 2.0},
                    ((U, "alice"),): {PRODUCE: 3.0}, ((U, None), (C, "app")): {PRODUCE: 4.0},
                    ((U, None), (C, None)): {PRODUCE: 5.0}, ((C, "app"),): {PRODUCE: 7.0}})
    assert m.quota_for(user, client)[1] == expected


def test_client_id_quotas_and_none():
    m, _ = manager({((C, "app"),): {PRODUCE: 7.0}, ((C, None),): {FETCH: 8.0}})
    assert m.quota_for("anyone", "app")[1] == 7.0
    assert m.quota_for("anyone", "other") is None  # the default client-id has no producer quota
    assert m.record("anyone", "other", 10**9) == 0


def test_a_fresh_client_gets_ten_seconds_worth_then_is_throttled_by_kafkas_formula():
    m, clock = manager({((C, "app"),): {PRODUCE: 1000.0}})
    assert m.record("u", "app", 9_000) == 0  # 9000 B over a window of at least 10 s: 900 B/s
    ms = m.record("u", "app", 6_000)  # 15000 B / 10 s = 1500 B/s: (1500 - 1000) / 1000 * 10 s
    assert ms == 5_000
    clock.now += 30  # the samples expire
    assert m.record("u", "app", 100) == 0


def test_a_byte_rate_throttle_is_unbounded_but_fits_the_field_and_a_fetch_can_give_bytes_back():
    """Kafka bounds only the request quota's throttle (one window); a client far over a byte
    rate waits as long as its excess takes to drain: 400 KB at 10 KB/s is 30 s."""
    m, _ = manager({((U, "alice"),): {PRODUCE: 10_000.0}})
    assert m.record("alice", "c", 400_000) == 30_000  # (40000 - 10000) / 10000 * 10 s
    m, _ = manager({((U, "alice"),): {FETCH: 10.0}}, FETCH)
    assert m.record("alice", "c", 10**9) == 2**31 - 1  # throttle_time_ms is an int32
    m.unrecord("alice", "c", 10**9)
    assert m.record("alice", "c", 1) == 0
    assert m.max_value_in_window("alice", "c") == 10.0 * (WINDOWS - 1) * WINDOW_S
    assert m.max_value_in_window("bob", "c") == float("inf")


def test_once_a_quota_is_set_clients_without_one_are_measured_and_their_history_counts():
    """Kafka's quotasEnabled: from the first quota of a kind on, every client's usage is
    recorded (under its client id here), so a quota set later throttles on what came before."""
    stored: dict = {}
    clock = Clock()
    m = ClientQuotaManager(PRODUCE, lambda: stored, clock)
    assert m.record("u", "late", 300_000) == 0 and not m.sensors  # no quota of this kind yet
    stored[entity_key(((C, "other"),))] = {PRODUCE: 10_000.0}
    clock.now += 1.5  # the set of enabled quota kinds is looked at once a second
    assert m.record("u", "late", 300_000) == 0 and ("", "late") in m.sensors  # measured, unlimited
    stored[entity_key(((C, "late"),))] = {PRODUCE: 20_000.0}
    assert m.record("u", "late", 10_000) == 5_500  # 310000 B / 10 s against 20000 B/s


def test_principals_are_quota_users():
    assert user_name("User:alice") == "alice" and user_name("User:ANONYMOUS") == "ANONYMOUS"


def test_every_user_under_the_default_user_quota_has_a_rate_of_its_own():
    """Kafka's quota metric tags: the default user quota applies to each user on its own (two
    users at 900 B/s each are both within 1000 B/s), and a user's client ids share its quota."""
    m, _ = manager({((U, None),): {PRODUCE: 1000.0}})
    assert m.record("alice", "app", 9_000) == 0 and m.record("bob", "app", 9_000) == 0
    assert m.quota_for("alice", "app")[0] == ("alice", "") and m.quota_for("bob", "x")[0] == ("bob", "")
    assert m.record("alice", "other-app", 6_000) == 5_000  # alice's two clients: 15000 B / 10 s


def test_quota_metrics_are_kafkas_per_entity_byte_rate_and_throttle_time():
    from broker.quotas import collect_quota_metrics

    m, _ = manager({((U, "alice"), (C, None)): {PRODUCE: 1000.0}})
    m.record("alice", "app", 15_000)
    families = {f.name: f for f in collect_quota_metrics({PRODUCE: m})}
    rate = families["kafka_server_produce_byte_rate"].samples[0]
    throttle = families["kafka_server_produce_throttle_time"].samples[0]
    assert rate.labels == {"user": "alice", "client_id": "app"} and rate.value == 1500.0
    assert throttle.labels == rate.labels and throttle.value == 5000


def test_an_entitys_sensor_is_dropped_after_an_hour_without_requests():
    from broker.quotas import SENSOR_EXPIRATION_S, SWEEP_INTERVAL_S

    m, clock = manager({((C, None),): {PRODUCE: 1000.0}})  # the default client-id: one sensor per id
    for i in range(100):
        m.record("u", f"once-{i}", 10)
    assert len(m.sensors) == 100
    clock.now += SENSOR_EXPIRATION_S - 60
    m.record("u", "busy", 10)
    assert len(m.sensors) == 101  # an hour has not passed yet
    clock.now += 60 + SWEEP_INTERVAL_S
    assert [tags for tags, _, _ in m.rates()] == [("", "busy")]  # a scrape sweeps too
    assert set(m.throttled_ms) == {("", "busy")}
