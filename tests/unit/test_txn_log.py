"""``__transaction_state`` records (Kafka's TransactionLogKey/Value) and the id -> partition map."""

from coordinator.transaction import log as txn_log
from coordinator.transaction.state import TxnState, TxnTransitMetadata

S = TxnState


def transit(state=S.ONGOING, partitions=frozenset({("b", 1), ("b", 0)}), start=1000):
    return TxnTransitMetadata(producer_id=7, last_producer_id=7, producer_epoch=2, last_producer_epoch=1,
                              txn_timeout_ms=60000, state=state, partitions=partitions,
                              txn_start_timestamp=start, txn_last_update_timestamp=2000)


def test_key_bytes():
    assert txn_log.encode_key("tx") == bytes.fromhex("0000" "0002") + b"tx"
    assert txn_log.decode_key(txn_log.encode_key("tx-é")) == "tx-é"


def test_value_v0_bytes():
    value = txn_log.encode_value(transit())
    assert value == bytes.fromhex(
        "0000"               # version 0
        "0000000000000007"   # producer id
        "0002"               # producer epoch
        "0000ea60"           # transaction timeout 60000
        "01"                 # status Ongoing
        "00000001"           # one topic
        "0001" "62"          # "b"
        "00000002" "00000000" "00000001"  # partitions [0, 1]
        "00000000000007d0"   # last update 2000
        "00000000000003e8")  # start 1000
    back = txn_log.decode_value(value)
    assert (back.producer_id, back.producer_epoch, back.txn_timeout_ms, back.state, back.partitions,
            back.txn_last_update_timestamp, back.txn_start_timestamp) == \
        (7, 2, 60000, S.ONGOING, frozenset({("b", 0), ("b", 1)}), 2000, 1000)
    # Kafka 3.x persists neither the last producer id nor the last epoch.
    assert (back.last_producer_id, back.last_producer_epoch) == (-1, -1)


def test_empty_writes_null_partitions_and_complete_an_empty_array():
    empty = txn_log.encode_value(transit(S.EMPTY, frozenset(), -1))
    assert empty[17:21] == b"\xff\xff\xff\xff"
    assert txn_log.decode_value(empty).partitions == frozenset()
    complete = txn_log.encode_value(transit(S.COMPLETE_COMMIT, frozenset()))
    assert complete[17:21] == b"\x00\x00\x00\x00" and complete[16] == 4


def test_value_v1_flexible_is_read():
    # v1 as Kafka 4.x writes it: compact arrays/strings, tagged PreviousProducerId (0) = 6
    # and ClientTransactionVersion (2) = 1.
    value = bytes.fromhex(
        "0001" "0000000000000007" "0002" "0000ea60" "01"
        "02" "02" "62" "03" "00000000" "00000001" "00"
        "00000000000007d0" "00000000000003e8"
        "02" "00" "08" "0000000000000006" "02" "02" "0001")
    back = txn_log.decode_value(value)
    assert (back.producer_id, back.last_producer_id, back.producer_epoch, back.state, back.partitions,
            back.txn_last_update_timestamp, back.txn_start_timestamp) == \
        (7, 6, 2, S.ONGOING, frozenset({("b", 0), ("b", 1)}), 2000, 1000)


def test_partition_for_is_javas():
    assert txn_log.java_string_hash("hello") == 99162322
    assert txn_log.java_string_hash("polygenelubricants") == -(1 << 31)
    assert txn_log.partition_for("hello", 50) == 99162322 % 50
    assert txn_log.partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) = 0
    h = txn_log.java_string_hash("my-transactional-id-1")
    assert txn_log.partition_for("my-transactional-id-1", 50) == abs(h) % 50
    assert txn_log.partition_for("", 50) == 0
    # UTF-16 code units, as Java: a character outside the BMP is two of them.
    assert txn_log.java_string_hash("\U0001F600") == (0xD83D * 31 + 0xDE00)


def test_value_v1_bytes_with_the_tagged_fields_of_transaction_version_2():
    t = TxnTransitMetadata(producer_id=7, last_producer_id=6, producer_epoch=2, last_producer_epoch=1,
                           txn_timeout_ms=60000, state=S.PREPARE_COMMIT, partitions=frozenset({("b", 0)}),
                           txn_start_timestamp=1000, txn_last_update_timestamp=2000, next_producer_id=9,
                           client_transaction_version=2)
    value = txn_log.encode_value(t, transaction_version=2)
    assert value == bytes.fromhex(
        "0001"               # version 1 (flexible)
        "0000000000000007"   # producer id
        "0002"               # producer epoch
        "0000ea60"           # transaction timeout 60000
        "02"                 # status PrepareCommit
        "02"                 # compact array: one topic
        "02" "62"            # compact string "b"
        "02" "00000000"      # compact array: partition 0
        "00"                 # the topic's tagged fields
        "00000000000007d0"   # last update 2000
        "00000000000003e8"   # start 1000
        "03"                 # three tagged fields
        "00" "08" "0000000000000006"  # 0: previous producer id
        "01" "08" "0000000000000009"  # 1: next producer id
        "02" "02" "0002"     # 2: client transaction version
    )
    assert txn_log.decode_value(value) == TxnTransitMetadata(
        producer_id=7, last_producer_id=6, producer_epoch=2, last_producer_epoch=-1, txn_timeout_ms=60000,
        state=S.PREPARE_COMMIT, partitions=frozenset({("b", 0)}), txn_start_timestamp=1000,
        txn_last_update_timestamp=2000, next_producer_id=9, client_transaction_version=2)
    # Defaults are left out, as Kafka's generated code leaves them out; Empty's partitions are null.
    empty = txn_log.encode_value(TxnTransitMetadata(7, -1, 0, -1, 60000, S.EMPTY, frozenset(), -1, 5), 1)
    assert empty.endswith(bytes.fromhex("00" "0000000000000005" "ffffffffffffffff" "00"))
    assert txn_log.decode_value(empty).client_transaction_version == 0
