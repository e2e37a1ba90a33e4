"""The hand-written Produce/Fetch/Metadata encoders must give exactly kio's bytes, for every
version the registry advertises (so registering a new version without teaching the encoder
fails here)."""

import uuid

import pytest

import broker.handlers  # noqa: F401  (registers every handler)
from protocol import fast
from protocol.api import REGISTRY
from protocol.codec import encode_body


def served(key: int) -> range:
    spec = REGISTRY[key]
    return range(max(spec.min_version, spec.refused_below), spec.max_version + 1)


@pytest.mark.parametrize("version", served(0))
def test_produce_response_matches_kio(version):
    parts = [(0, 0, 42, -1, 0, None, []), (3, 6, -1, -1, -1, "not the leader", []),
             (4, 87, -1, -1, 0, "One or more records...", [(0, "no key"), (2, "no key either")])]
    # From v13 a topic is answered by its id (KIP-516).
    orders = uuid.UUID("12345678-1234-5678-1234-567812345678") if version >= 13 else "orders"
    t = uuid.UUID(int=7) if version >= 13 else "t"
    ours = fast.encode_produce_response(version, [(orders, parts), (t, [(1, 0, 7, 1700000000000, 5, None, [])])])
    kio = encode_body(0, version, {
        "responses": [
            {"name": orders, "topic_id": orders, "partition_responses": [
                {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1,
                 "log_start_offset": 0, "error_message": None},
                {"index": 3, "error_code": 6, "base_offset": -1, "log_append_time": -1,
                 "log_start_offset": -1, "error_message": "not the leader"},
                {"index": 4, "error_code": 87, "base_offset": -1, "log_append_time": -1,
                 "log_start_offset": 0, "error_message": "One or more records...",
                 "record_errors": [{"batch_index": 0, "batch_index_error_message": "no key"},
                                   {"batch_index": 2, "batch_index_error_message": "no key either"}]}]},
            {"name": t, "topic_id": t, "partition_responses": [
                {"index": 1, "error_code": 0, "base_offset": 7, "log_append_time": 1700000000000,
                 "log_start_offset": 5, "error_message": None}]},
        ],
        "throttle_time": 0,
    })
    assert ours == kio  # before v8 neither the message nor the record errors are on the wire


@pytest.mark.parametrize("version", served(1))
def test_fetch_response_matches_kio(version):
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    records = b"\x00" * 70
    parts = [(0, 0, 100, 90, 3, None, records), (1, 1, -1, -1, -1, [(7, 11), (8, 12)], b""),
             (2, 0, 5, 5, 0, [], None)]
    ours = fast.encode_fetch_response(version, 0, 0, [("orders", tid, parts)])
    kio = encode_body(1, version, {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "orders", "topic_id": tid, "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 100, "last_stable_offset": 90,
             "log_start_offset": 3, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": records},
            {"partition_index": 1, "error_code": 1, "high_watermark": -1, "last_stable_offset": -1,
             "log_start_offset": -1, "aborted_transactions": [
                 {"producer_id": 7, "first_offset": 11}, {"producer_id": 8, "first_offset": 12}],
             "preferred_read_replica": -1, "records": b""},
            {"partition_index": 2, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
             "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1,
             "records": None},
        ]}],
    })
    assert ours == kio


@pytest.mark.parametrize("version", [7, 12, 16, 18])
def test_fetch_session_error_matches_kio(version):
    ours = fast.encode_fetch_response(version, 70, 0, [])
    kio = encode_body(1, version, {"throttle_time": 0, "error_code": 70, "session_id": 0, "responses": []})
    assert ours == kio


@pytest.mark.parametrize("version", served(3))
def test_metadata_response_matches_kio(version):
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    topics = [(0, "orders", tid, False, [(0, 0, 1, 5, [1], [1], []), (0, 1, 1, 5, [1, 2], [1], [2])]),
              (3, "missing", uuid.UUID(int=0), False, [])]
    ours = fast.encode_metadata_response(version, [(1, "localhost", 9092, None), (2, "h2", 9093, "r1")],
                                         "clusterid", 1, topics)
    kio = encode_body(3, version, {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None},
                    {"node_id": 2, "host": "h2", "port": 9093, "rack": "r1"}],
        "cluster_id": "clusterid", "controller_id": 1,
        "topics": [
            {"error_code": 0, "name": "orders", "topic_id": tid, "is_internal": False,
             "partitions": [
                 {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 5,
                  "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []},
                 {"error_code": 0, "partition_index": 1, "leader_id": 1, "leader_epoch": 5,
                  "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": [2]}],
             "topic_authorized_operations": -2147483648},
            {"error_code": 3, "name": "missing", "topic_id": uuid.UUID(int=0), "is_internal": False,
             "partitions": [], "topic_authorized_operations": -2147483648}],
        "cluster_authorized_operations": -2147483648,
    })
    assert ours == kio


def test_produce_v13_answers_the_zero_topic_id_for_none():
    """kio decodes the zero topic id as None; the answer echoes it as the zero id."""
    parts = [(0, 100, -1, -1, -1, None, [])]
    ours = fast.encode_produce_response(13, [(None, parts)])
    kio = encode_body(0, 13, {"responses": [{"topic_id": uuid.UUID(int=0), "partition_responses": [
        {"index": 0, "error_code": 100, "base_offset": -1, "log_append_time": -1,
         "log_start_offset": -1, "error_message": None}]}], "throttle_time": 0})
    assert ours == kio


def test_metadata_v13_top_level_error_code_matches_kio():
    ours = fast.encode_metadata_response(13, [], "c", 1, [], error_code=74)
    kio = encode_body(3, 13, {"throttle_time": 0, "brokers": [], "cluster_id": "c", "controller_id": 1,
                              "topics": [], "error_code": 74})
    assert ours == kio and ours[-3:] == b"\x00\x4a\x00"


@pytest.mark.parametrize("version", range(8, 14))
def test_metadata_response_with_authorized_operations_matches_kio(version):
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    ours = fast.encode_metadata_response(version, [], "c", 1, [(0, "orders", tid, False, [], 3576)],
                                         cluster_authorized_operations=8096)
    kio = encode_body(3, version, {
        "throttle_time": 0, "brokers": [], "cluster_id": "c", "controller_id": 1,
        "topics": [{"error_code": 0, "name": "orders", "topic_id": tid, "is_internal": False, "partitions": [],
                    "topic_authorized_operations": 3576}],
        "cluster_authorized_operations": 8096})
    assert ours == kio
