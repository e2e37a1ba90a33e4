"""The embedded store's snapshot + change log (metadata/embedded_log.py): what
was acknowledged comes back after a reopen, a torn last record is cut off, and a change costs
what it changed rather than a rewrite of every topic."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from metadata import embedded_log as metadata_log
from metadata.embedded_store import EmbeddedMetadataStore as MetadataStore
from security.acls import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAcl


def _open(tmp_path) -> MetadataStore:
    return MetadataStore(str(tmp_path / "__cluster_metadata.json"), 1)


def _image(store: MetadataStore) -> dict:
    return store._image()


def test_every_kind_of_change_survives_a_reopen(tmp_path):
    store = _open(tmp_path)
    store.create_topic("kept", 3, {"cleanup.policy": "compact"})
    store.create_topic("gone", 2, {})
    store.delete_topic("gone")
    store.add_partitions("kept", 5)
    store.set_topic_configs("kept", {"retention.ms": "1000"})
    store.set_group_configs("g", {"consumer.session.timeout.ms": "45000"})
    store.alter_client_quotas({"user=alice": {"producer_byte_rate": 1024.0}})
    acl = StandardAcl(ResourceType.TOPIC, "kept", PatternType.LITERAL, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    asyncio.run(store.create_acls([acl]))
    block = store.allocate_producer_id_block()
    before = _image(store)

    reopened = _open(tmp_path)
    assert _image(reopened) == before
    assert sorted(reopened.image.topics) == ["kept"] and len(reopened.image.topics["kept"].partitions) == 5
    assert reopened.image.topics["kept"].configs == {"retention.ms": "1000"}
    assert reopened.image.acls == {acl.acl_id: acl}
    assert reopened.allocate_producer_id_block()[0] == block[0] + block[1]
    assert reopened.image.applied_offset == before["metadata_offset"] + 1


def test_a_change_is_logged_not_rewritten_into_the_snapshot(tmp_path, monkeypatch):
    store = _open(tmp_path)
    snapshots = []
    real = metadata_log.MetadataLog.write_snapshot
    monkeypatch.setattr(metadata_log.MetadataLog, "write_snapshot",
                        lambda self, image: (snapshots.append(image["metadata_offset"]), real(self, image)))
    monkeypatch.setattr(metadata_log, "MIN_LOG_BYTES_BEFORE_SNAPSHOT", 4096)
    for i in range(400):
        store.create_topic(f"t{i}", 4, {})
    # The log is folded into a snapshot only once it outgrows the snapshot: a handful of
    # rewrites for 400 topics, each at least as large as the one before (amortized O(1) a change).
    assert 0 < len(snapshots) <= 12
    assert len(_open(tmp_path).image.topics) == 400


def test_a_torn_last_record_is_cut_off_and_the_log_goes_on(tmp_path):
    store = _open(tmp_path)
    store.create_topic("a", 1, {})
    log_path = store._log.log_path
    size = os.path.getsize(log_path)
    with open(log_path, "ab") as f:  # a crash halfway through the next record
        f.write(b'{"offset": 99, "entries": {"topics": {"b": {"topic_id"')
    reopened = _open(tmp_path)
    assert sorted(reopened.image.topics) == ["a"]
    assert os.path.getsize(log_path) == size
    reopened.create_topic("c", 1, {})
    assert sorted(_open(tmp_path).image.topics) == ["a", "c"]


def test_records_already_in_the_snapshot_are_not_applied_again(tmp_path):
    """A crash after the new snapshot is in place but before the log is emptied."""
    store = _open(tmp_path)
    store.create_topic("a", 1, {})
    store.delete_topic("a")
    with open(store._log.log_path) as f:
        old_records = f.read()
    store._log.write_snapshot(store._image())
    with open(store._log.log_path, "a") as f:
        f.write(old_records)
    assert "a" not in _open(tmp_path).image.topics


def test_a_corrupt_record_before_the_last_is_refused(tmp_path):
    store = _open(tmp_path)
    store.create_topic("a", 1, {})
    store.create_topic("b", 1, {})
    with open(store._log.log_path) as f:
        lines = f.read().split("\n")
    lines[0] = lines[0][:10]
    with open(store._log.log_path, "w") as f:
        f.write("\n".join(lines))
    with pytest.raises(ValueError, match=r"__cluster_metadata.json.log: record 1 is corrupt"):
        _open(tmp_path)


def test_the_snapshot_of_a_store_written_before_the_log_existed_still_loads(tmp_path):
    """Data directories from before the change log: the whole image in one file."""
    store = _open(tmp_path)
    store.create_topic("a", 2, {})
    image = _image(store)
    os.remove(store._log.log_path)
    with open(store.path, "w") as f:
        json.dump(image, f)
    assert len(_open(tmp_path).image.topics["a"].partitions) == 2
