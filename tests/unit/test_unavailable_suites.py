"""The run's summary names the compatibility suites it could not fetch (no broker)."""

from types import SimpleNamespace

import pytest

from compat.sources import SuiteUnavailable
from tests.support.unavailable import note_unavailable, summary_line


def test_every_unavailable_suite_is_named_once_in_one_line():
    config = SimpleNamespace(stash=pytest.Stash())
    assert summary_line(config) is None
    for suite in ("confluent-kafka-python", "kafka-python", "confluent-kafka-python"):
        reason = note_unavailable(config, suite, SuiteUnavailable(f"{suite[:5]}: github.com cannot be reached"))
        assert reason.endswith("github.com cannot be reached")
    line = summary_line(config)
    assert "\n" not in line and line.startswith("compatibility suites NOT RUN")
    assert line.count("confluent-kafka-python: confl:") == 1 and "; kafka-python: kafka:" in line
