"""The follower's hand-written Fetch response decoders (v12 by topic name, v15 by topic id)
read what kio reads."""

from __future__ import annotations

import uuid

import pytest
from kio.serial import entity_reader

from protocol import fast
from protocol.api import response_class
from protocol.records import build_batch

CASES = {
    "records-and-tags": [("orders", [
        (0, 0, 120, 118, 3, [(7, 100), (9, 110)], bytes(build_batch([(b"k", b"v")], base_offset=118)),
         {"diverging_epoch": (4, 97), "current_leader": (2, 9)}),
        (1, 6, -1, -1, -1, None, None, {"current_leader": (3, 2)}),
        (2, 0, 0, 0, 0, [], b"", None),
    ])],
    "two-topics": [("a", [(0, 0, 1, 1, 0, None, bytes(build_batch([(None, b"x" * 300)])))]),
                   ("b" * 200, [(5, 74, -1, -1, -1, None, None, None)])],
    "empty": [],
}


@pytest.mark.parametrize("version, decode, key", [(12, fast.decode_fetch_response_v12, "topic"),
                                                  (15, fast.decode_fetch_response_v15, "topic_id")])
@pytest.mark.parametrize("case", list(CASES))
def test_decoder_matches_kio(case, version, decode, key):
    topics = [(name, uuid.uuid4(), parts) for name, parts in CASES[case]]
    body = fast.encode_fetch_response(version, 0, 0, topics)
    expected, _ = entity_reader(response_class(1, version))(body, 0)
    error, _session_id, got = decode(body, 0)
    assert error == expected.error_code
    assert [name for name, _ in got] == [getattr(t, key) for t in expected.responses]
    for (_, parts), t in zip(got, expected.responses):
        assert len(parts) == len(t.partitions)
        for p, e in zip(parts, t.partitions):
            assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                    p.log_start_offset) == (e.partition_index, e.error_code, e.high_watermark,
                                            e.last_stable_offset, e.log_start_offset)
            diverging = (e.diverging_epoch.epoch, e.diverging_epoch.end_offset)
            assert (p.diverging_epoch or (-1, -1)) == diverging
            assert (None if p.records is None else bytes(p.records)) == e.records
