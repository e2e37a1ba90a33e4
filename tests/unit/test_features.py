"""Feature level updates as Kafka's FeatureControlManager checks them (metadata/controller/features.py)."""

from __future__ import annotations

import pytest

from metadata.controller.features import (
    DEFAULT_LEVELS,
    FeatureUpdate,
    InvalidUpdate,
    UpgradeType,
    effective_levels,
    plan_update,
)

TV = "transaction.version"


def test_a_cluster_that_never_changed_a_level_has_the_defaults():
    assert effective_levels(None) == DEFAULT_LEVELS
    assert effective_levels({}) == {}


@pytest.mark.parametrize("update, reason", [
    (FeatureUpdate(TV, 3), "Invalid update version 3 for feature transaction.version. Local controller 1 "
                           "only supports versions 0-2"),
    (FeatureUpdate("no.such.feature", 1), "Invalid update version 1 for feature no.such.feature. Local "
                                          "controller 1 does not support this feature."),
    (FeatureUpdate(TV, -1, UpgradeType.SAFE_DOWNGRADE), "A feature version cannot be less than 0."),
    (FeatureUpdate(TV, 0), "Can't downgrade the version of this feature without setting the upgrade type"),
    (FeatureUpdate(TV, 1, UpgradeType.UNKNOWN), "The controller does not support the given upgrade type."),
])
def test_refused_updates_say_why_as_kafka(update, reason):
    with pytest.raises(InvalidUpdate) as refused:
        plan_update(None, [update], node_id=1)
    assert reason in str(refused.value)


def test_a_downgrade_type_cannot_raise_a_level():
    with pytest.raises(InvalidUpdate, match="Can't downgrade to a newer version."):
        plan_update({}, [FeatureUpdate(TV, 1, UpgradeType.SAFE_DOWNGRADE)], node_id=1)


def test_a_downgrade_to_zero_removes_the_feature_and_an_upgrade_brings_it_back():
    downgraded = plan_update(None, [FeatureUpdate(TV, 0, UpgradeType.SAFE_DOWNGRADE)], node_id=1)
    assert downgraded == {}
    assert plan_update(downgraded, [FeatureUpdate(TV, 1)], node_id=1) == {TV: 1}
    assert plan_update(downgraded, [FeatureUpdate(TV, 0)], node_id=1) == {}  # unchanged: no downgrade


def test_a_new_cluster_stores_transaction_version_2_and_an_older_one_keeps_1(tmp_path):
    """A cluster created now finalizes transaction.version 2 (Kafka 4.x's format); one whose
    metadata an older kbroker wrote (no levels stored) stays at 1 across the upgrade."""
    import json

    from metadata.embedded_store import EmbeddedMetadataStore as MetadataStore

    new = MetadataStore(str(tmp_path / "new.json"), node_id=1)
    assert effective_levels(new.image.finalized_features) == {TV: 2}
    assert effective_levels(MetadataStore(str(tmp_path / "new.json"), node_id=1).image.finalized_features) == {TV: 2}
    old_path = tmp_path / "old.json"
    raw = json.loads((tmp_path / "new.json").read_text())
    raw["finalized_features"] = None  # as written before transaction version 2
    old_path.write_text(json.dumps(raw))
    assert effective_levels(MetadataStore(str(old_path), node_id=1).image.finalized_features) == {TV: 1}
