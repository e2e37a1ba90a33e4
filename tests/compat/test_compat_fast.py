"""CI's subset of the compatibility suites: each runs on a fresh kbroker node and every test
in its allowlist must pass (``make compat`` runs them all, on every target)."""

import pytest

from compat.run import available, run_one, runner
from compat.sources import SuiteUnavailable
from tests.support.unavailable import note_unavailable

FAST = [s for s in available() if runner(s).FAST]


@pytest.mark.compat
@pytest.mark.parametrize("suite", FAST)
def test_allowlisted_tests_pass_on_one_node(request, suite):
    try:
        regressions = run_one(suite, "kbroker", fast=True)
    except SuiteUnavailable as exc:  # its pinned source is not on this machine (compat/sources.py)
        pytest.skip(note_unavailable(request.config, suite, exc))
    assert regressions == []


@pytest.mark.compat
@pytest.mark.parametrize("suite, target", [("kcat", "kbroker-mtls"), ("confluent-kafka-python", "kbroker-sasl-ssl")])
def test_allowlisted_tests_pass_over_security(request, suite, target):
    """The security column's cheapest cells: kcat over mutual TLS, confluent-kafka-python's fast
    subset over SASL_SSL with SCRAM-SHA-512."""
    try:
        regressions = run_one(suite, target, fast=True)
    except SuiteUnavailable as exc:
        pytest.skip(note_unavailable(request.config, suite, exc))
    assert regressions == []
