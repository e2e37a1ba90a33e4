"""InitProducerId v6 (KIP-939, two-phase commit) against ours and Apache Kafka 4.3.1: advertised
only with ``unstable.api.versions.enable`` (Kafka 4.3.1 marks it unstable), ``enable2Pc``
refused unless ``transaction.two.phase.commit.enable``, ``keepPreparedTxn`` unsupported, and a
two-phase commit transaction without a timeout."""

from __future__ import annotations

import time

import pytest

from protocol.errors import ErrorCode as E
from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

SETTINGS = {
    "default": {},
    "unstable": {"unstable.api.versions.enable": "true"},
    "unstable-2pc": {"unstable.api.versions.enable": "true", "transaction.two.phase.commit.enable": "true"},
}


def _params():
    for target in TARGETS:
        name, marks = (target, ()) if isinstance(target, str) else (target.values[0], target.marks)
        for setting in SETTINGS:
            yield pytest.param((name, setting), marks=marks, id=f"{name}-{setting}")


@pytest.fixture(scope="module", params=list(_params()))
def broker(request, tmp_path_factory):
    target, setting = request.param
    for bootstrap in single_broker(target, tmp_path_factory, SETTINGS[setting]):
        yield bootstrap, setting


def _max_version(c: RawClient, key: int) -> int:
    r = c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    return next(k.max_version for k in r.api_keys if k.api_key == key)


def _init(c: RawClient, txn: str, two_pc: bool, keep: bool = False, timeout_ms: int = 60000):
    deadline = time.monotonic() + 30
    while True:
        c.call(10, 4, {"key_type": 1, "coordinator_keys": [txn]})
        r = c.call(22, 6, {"transactional_id": txn, "transaction_timeout": timeout_ms, "producer_id": -1,
                           "producer_epoch": -1, "enable2_pc": two_pc, "keep_prepared_txn": keep})
        if r.error_code not in (E.coordinator_load_in_progress, E.coordinator_not_available, E.not_coordinator,
                                E.concurrent_transactions) or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_v6_is_advertised_only_with_unstable_versions(broker):
    bootstrap, setting = broker
    with RawClient(bootstrap) as c:
        assert _max_version(c, 22) == (5 if setting == "default" else 6)


def test_enable_2pc_keep_prepared_and_the_timeout(broker):
    bootstrap, setting = broker
    if setting == "default":  # not served: the connection is closed, as for any unsupported version
        with RawClient(bootstrap) as c, pytest.raises((ConnectionError, OSError, EOFError)):
            _init(c, "v6-refused", two_pc=False)
        return
    enabled = setting == "unstable-2pc"
    with RawClient(bootstrap) as c:
        plain = _init(c, f"v6-plain-{setting}", two_pc=False)
        assert (plain.error_code, plain.producer_epoch) == (0, 0)
        assert (plain.ongoing_txn_producer_id, plain.ongoing_txn_producer_epoch) == (-1, -1)
        two_pc = _init(c, f"v6-2pc-{setting}", two_pc=True, timeout_ms=0)  # no timeout to check
        assert two_pc.error_code == (0 if enabled else E.transactional_id_authorization_failed)
        keep = _init(c, f"v6-keep-{setting}", two_pc=True, keep=True)
        assert keep.error_code == (E.unsupported_version if enabled else E.transactional_id_authorization_failed)
        assert _init(c, f"v6-keep-{setting}", two_pc=False, keep=True).error_code == E.unsupported_version
        assert _init(c, f"v6-bad-timeout-{setting}", two_pc=False, timeout_ms=0).error_code == \
            E.invalid_transaction_timeout
