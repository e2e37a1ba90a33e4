"""Feature levels (KIP-584): what this broker supports and the cluster's finalized levels.

Owns the checks Kafka's ``FeatureControlManager.updateFeatures`` applies to an UpdateFeatures
request, as a pure function of the finalized levels: an unknown upgrade type, a negative level,
a level outside what the broker supports, a downgrade without a downgrade type and a downgrade
type that would raise the level are each INVALID_UPDATE_VERSION, and one failed update fails
the whole request, as in Kafka. A level of 0 removes the feature from the finalized set.

The finalized levels are cluster metadata (the ``features`` key in etcd, the embedded store's
file): every broker answers them in ApiVersions (v3+) with the epoch of their last change. A
new cluster stores ``NEW_CLUSTER_LEVELS`` when it is created, as a new Kafka 4.x cluster has the
levels its format gave it; one created by an older kbroker, which stored none, keeps
``DEFAULT_LEVELS`` until ``kafka-features upgrade`` changes them.

``transaction.version`` is supported up to 2 and a new cluster starts at 2, as Kafka 4.x's
format starts it: clients that read the finalized level (the Java client 4.x) then use
transaction version 2 (KIP-890 part 2); a downgrade applies to the transactions they begin
after it.

Differs from Kafka: ``metadata.version``, ``kraft.version`` and ``group.version`` are not
features here (no KRaft log; consumer groups need no flag).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import IntEnum

from protocol.errors import ErrorCode, KafkaError

from ..image import MetadataCache
from . import settled

TRANSACTION_VERSION = "transaction.version"

# name -> (min, max) supported by this broker.
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2)}
# The levels a new cluster stores when it is created (Kafka 4.x's format bootstraps these).
NEW_CLUSTER_LEVELS: dict[str, int] = {TRANSACTION_VERSION: 2}
# The levels of a cluster that stored none: one created before transaction version 2, which
# keeps the level it ran at across the upgrade, as a Kafka cluster keeps its finalized levels.
DEFAULT_LEVELS: dict[str, int] = {TRANSACTION_VERSION: 1}


class UpgradeType(IntEnum):
    """Kafka's FeatureUpdate.UpgradeType (UpdateFeatures v1+; v0's allow_downgrade maps on it)."""
    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def of(cls, code: int) -> UpgradeType:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


class InvalidUpdate(Exception):
    code = ErrorCode.invalid_update_version


def effective_levels(stored: dict[str, int] | None) -> dict[str, int]:
    """The finalized levels: those stored, else the defaults; level 0 features left out."""
    levels = dict(DEFAULT_LEVELS if stored is None else stored)
    return {name: level for name, level in levels.items() if level > 0}


def _range(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def _check(update: FeatureUpdate, current: int, node_id: int) -> None:
    name, level = update.feature, update.level

    def invalid(reason: str) -> InvalidUpdate:
        return InvalidUpdate(f"Invalid update version {level} for feature {name}. {reason}")

    if update.upgrade_type is UpgradeType.UNKNOWN:
        raise invalid("The controller does not support the given upgrade type.")
    if level < 0:
        raise invalid("A feature version cannot be less than 0.")
    low, high = SUPPORTED.get(name, (0, 0))
    if not low <= level <= high:
        what = f"Local controller {node_id}"
        raise invalid(f"{what} does not support this feature." if high == 0
                      else f"{what} only supports versions {_range(low, high)}")
    if level < current and update.upgrade_type is UpgradeType.UPGRADE:
        raise invalid("Can't downgrade the version of this feature without setting the upgrade type to "
                      "either safe or unsafe downgrade.")
    if level > current and update.upgrade_type is not UpgradeType.UPGRADE:
        raise invalid("Can't downgrade to a newer version.")


def plan_update(stored: dict[str, int] | None, updates: list[FeatureUpdate], node_id: int) -> dict[str, int]:
    """The finalized levels after ``updates``, or :class:`InvalidUpdate` for the first bad one."""
    levels = effective_levels(stored)
    for update in updates:
        _check(update, levels.get(update.feature, 0), node_id)
        levels[update.feature] = update.level
    return {name: level for name, level in levels.items() if level > 0}


class FeatureControlManager:
    """UpdateFeatures: the levels planned on the image and written by compare-and-swap on the
    epoch they were planned on; a plan overtaken by another update is made again on its result."""

    ATTEMPTS = 10

    def __init__(self, image: MetadataCache, store) -> None:
        self.image = image
        self.store = store

    async def update(self, updates: list[FeatureUpdate], validate_only: bool = False) -> None:
        """Raises :class:`InvalidUpdate` for a bad update (nothing changes)."""
        for _ in range(self.ATTEMPTS):
            epoch = self.image.features_epoch
            levels = plan_update(self.image.finalized_features, updates, self.image.node_id)
            if validate_only or await settled(self.store.update_features(levels, epoch)):
                return
            await asyncio.sleep(0.05)  # the image catches up with the update that came first
        raise KafkaError(ErrorCode.request_timed_out, "The feature levels kept changing; try again.")
