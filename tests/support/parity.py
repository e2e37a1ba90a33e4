"""One broker of either kind for the parity tests that run the same requests against ours and
Apache Kafka 4.3.1: the module fixture's ``params`` and the broker it yields."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.devcluster import free_port

# ``params`` for a module fixture: ours always, Kafka in the slow runs.
TARGETS = ["kbroker", pytest.param("kafka", marks=pytest.mark.slow)]


def single_broker(target: str, tmp_path_factory, settings: dict[str, str] | None = None) -> Iterator[str]:
    """A fresh broker of ``target`` with ``settings`` (Kafka's names); yields its bootstrap."""
    settings = dict(settings or {})
    if target == "kbroker":
        from tests.support.broker_process import BrokerProcess

        b = BrokerProcess(str(tmp_path_factory.mktemp("parity")), overrides=settings)
        b.start()
        try:
            yield b.bootstrap
        finally:
            b.stop()
        return
    from compat.kafka.kraft import KafkaBroker

    kb = KafkaBroker(port=free_port(), controller_port=free_port(), heap_opts="-Xmx512m -Xms256m",
                     extra_config=settings).start()
    try:
        yield kb.bootstrap
    finally:
        kb.stop()
