"""Fixtures of the pipeline tests: one broker process and one loaded input topic per session."""

from __future__ import annotations

import pytest

from tests.pipeline.helpers import N_MALFORMED, N_VALID, WATERMARK_MS, WINDOW_MS, Orders, expected_aggregates
from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic


@pytest.fixture(scope="session")
def pipeline_broker(tmp_path_factory):
    proc = BrokerProcess(str(tmp_path_factory.mktemp("pipeline-broker") / "data"))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def orders(pipeline_broker) -> Orders:
    """50k events (300 malformed, an aborted transaction, the end-of-input event) in 3 partitions."""
    from pipeline import sample

    topic = "orders-50k"
    create_topic(pipeline_broker.bootstrap, topic, 3)
    data = sample.generate(N_VALID, N_MALFORMED, seed=9)
    eoi = sample.end_of_input(data.last_ts, WINDOW_MS, WATERMARK_MS)
    sample.load(pipeline_broker.bootstrap, topic, data.records + [(b"end", eoi)])
    return Orders(topic, expected_aggregates(data.valid), data.malformed)


