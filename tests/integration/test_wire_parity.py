"""Bad input on the wire: our broker answers exactly as Apache Kafka 4.3.1 does.

Each case is sent to our broker and to a real single-node KRaft Kafka (jars from Maven
Central, ``compat/kafka``) in the same run; the outcomes (error code, or closed connection,
or the raw bytes of the ApiVersions fallback) must be identical. Error messages may differ.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from protocol import records as rb
from tests.support.clients import create_topic
from tests.support.raw import RawClient, good_batch, produce_request

pytestmark = pytest.mark.kafka_tools
REPO = Path(__file__).resolve().parents[2]
TOPIC = "wire-parity"


@pytest.fixture(scope="module")
def apache_kafka():
    if shutil.which("java") is None:
        pytest.skip("Java is not installed: Apache Kafka cannot run here")
    fetched = subprocess.run(["bash", str(REPO / "compat/kafka/fetch.sh")], capture_output=True,
                             text=True, timeout=900, check=False)
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    from compat.kafka.kraft import kraft_broker

    with kraft_broker() as kb:
        create_topic(kb.bootstrap, TOPIC, 1)
        _wait_until_writable(kb.bootstrap)
        yield kb.bootstrap


@pytest.fixture(scope="module")
def ours(broker):
    create_topic(broker.bootstrap, TOPIC, 1)
    return broker.bootstrap


def _wait_until_writable(bootstrap: str, timeout: float = 30.0) -> None:
    """Right after CreateTopics Kafka may still answer NOT_LEADER_OR_FOLLOWER."""
    import time

    deadline = time.monotonic() + timeout
    while _produce_outcome(bootstrap, bytes(good_batch())) != "none":
        assert time.monotonic() < deadline, "Apache Kafka never accepted a produce"
        time.sleep(0.2)


def _produce_outcome(bootstrap: str, records: bytes, version: int = 9) -> str:
    with RawClient(bootstrap) as c:
        try:
            resp = c.request(0, version, produce_request(TOPIC, records))
        except ConnectionError:
            return "closed"
    return resp.responses[0].partition_responses[0].error_code.name


def _frame_outcome(bootstrap: str, frame: bytes) -> bytes | str:
    with RawClient(bootstrap) as c:
        c.send_frame(frame)
        reply = c.recv_frame()
    return "closed" if reply is None else reply


def _bad_crc() -> bytes:
    b = good_batch()
    b[-1] ^= 0xFF
    return bytes(b)


def _magic(m: int) -> bytes:
    b = good_batch()
    b[rb.MAGIC_OFFSET] = m
    return bytes(b)


PRODUCE_CASES = {
    "bad_crc": lambda: (_bad_crc(), 9),
    "magic_1": lambda: (_magic(1), 9),
    "magic_0": lambda: (_magic(0), 9),
    "two_batches": lambda: (bytes(good_batch() + good_batch()), 9),
    "truncated_batch": lambda: (bytes(good_batch()[:-5]), 9),
    "zstd_before_v7": lambda: (bytes(rb.build_batch([(b"k", b"v")], compression=4)), 6),
    "good": lambda: (bytes(good_batch()), 9),
}

FRAME_CASES = {
    "unknown_api_key": struct.pack(">hhih", 999, 0, 1, -1),
    "metadata_v99": RawClient.header(3, 99, 1, header_version=2),
    "api_versions_v127": struct.pack(">hhih", 18, 127, 42, -1) + b"\x00",
    "api_versions_v127_unreadable_header": struct.pack(">hhih", 18, 127, 42, -1),
    "api_versions_v5_with_body": struct.pack(">hhih", 18, 5, 43, 3) + b"abc\x00\x02a\x021\x00",
    "metadata_truncated_body": RawClient.header(3, 12, 1) + b"\x05\x02",
}


@pytest.mark.parametrize("case", sorted(PRODUCE_CASES))
def test_produce_error_matches_apache_kafka(case, ours, apache_kafka):
    records, version = PRODUCE_CASES[case]()
    assert _produce_outcome(ours, records, version) == _produce_outcome(apache_kafka, records, version)


@pytest.mark.parametrize("case", sorted(FRAME_CASES))
def test_frame_handling_matches_apache_kafka(case, ours, apache_kafka):
    frame = FRAME_CASES[case]
    assert _frame_outcome(ours, frame) == _frame_outcome(apache_kafka, frame)
