"""Controller election: one broker at a time holds the ``controller`` key under a lease.

Owns campaigning for the key, keeping its lease alive and resigning. The key's lease is its
own (``controller.quorum.fetch.timeout.ms``, 2 s by default, whole seconds and at least two, kept
alive every quarter of it), so a dead controller is replaced in about that long whatever the
broker session timeout. The key's create_revision is the controller epoch: every controller
write compares it (:mod:`.writer`), the fencing token that makes etcd's lease-based election
safe against a controller paused past its lease.

Differs from Kafka: the controller is elected by an etcd transaction, not by a KRaft vote; every
broker is a candidate (KRaft's combined mode).
"""

from __future__ import annotations

import asyncio

import structlog
from aetcd import exceptions as etcd_errors

from .client import ETCD_ERRORS, FailoverEtcdClient, StoreUnavailable, WriteOutcomeUnknown
from .keys import KeySpace

__all__ = ["ControllerElection"]

log = structlog.get_logger("metadata.etcd.election")


class ControllerElection:
    def __init__(self, client: FailoverEtcdClient, keys: KeySpace, node_id: int, ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self.ttl = ttl_s
        self.lease_id: int | None = None  # while this broker holds the key
        self.epoch = 0  # the key's create_revision when this broker took it
        self._keepalive: asyncio.Task | None = None

    async def campaign(self) -> int:
        """Try to become controller; returns the controller epoch (create_revision) or 0."""
        t = self.client.transactions
        key = self.keys.key("controller")
        lease = await self.client.grant_lease(self.ttl)
        try:
            ok, _responses, revision = await self.client.transaction(
                [t.version(key) == 0], [t.put(key, str(self.node_id).encode(), lease=lease)])
        except WriteOutcomeUnknown:
            got = await self.client.get(key)  # ours if the campaign was applied
            ok = got is not None and got.lease == lease
            revision = got.create_revision if ok else 0
        except etcd_errors.ClientError as exc:
            await self._revoke_quietly(lease)
            if "lease not found" not in str(exc):
                raise
            # The lease lapsed before the campaign reached etcd (a stalled process): no harm done.
            log.info("controller_campaign_lease_lapsed", node_id=self.node_id)
            return 0
        except BaseException:
            await self._revoke_quietly(lease)
            raise
        if not ok:
            await self._revoke_quietly(lease)
            return 0
        self.lease_id, self.epoch = lease, revision
        self._keepalive = asyncio.get_running_loop().create_task(self._keepalive_loop(lease))
        return revision

    async def _keepalive_loop(self, lease: int) -> None:
        """Renew the lease every quarter TTL until it is lost (expired: another broker may
        already hold the role) or given up."""
        interval = self.ttl / 4
        while self.lease_id == lease:
            await asyncio.sleep(interval)
            try:
                ttl = await self.client.refresh_lease(lease, timeout=interval * 2)
            except (*ETCD_ERRORS, StoreUnavailable):
                continue  # the TTL decides: if etcd stays unreachable, the role lapses there too
            if ttl <= 0:
                log.warning("controller_lease_expired", node_id=self.node_id)
                if self.lease_id == lease:
                    self.lease_id = None
                return

    def holds(self, epoch: int) -> bool:
        """Whether this broker took the controller key at ``epoch`` and keeps its lease."""
        return self.lease_id is not None and self.epoch == epoch

    async def remove_stale(self, epoch: int) -> None:
        """Delete a controller key of ``epoch`` that names this broker but is not this process's
        (its previous life's, whose process is gone, or one whose lease this process lost):
        a new controller is elected now rather than when that lease lapses."""
        key, t = self.keys.key("controller"), self.client.transactions
        try:
            await self.client.transaction([t.create(key) == epoch], [t.delete(key)])
        except WriteOutcomeUnknown:
            pass  # deleted or not, the next pass sees the key as it is
        log.info("stale_controller_key_removed", node_id=self.node_id, controller_epoch=epoch)

    async def resign(self) -> None:
        """Give up the controller role at once (a controlled shutdown), if held."""
        lease, self.lease_id = self.lease_id, None
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        if lease is not None:
            await self._revoke_quietly(lease)

    async def _revoke_quietly(self, lease: int) -> None:
        try:
            await self.client.revoke_lease(lease, timeout=2)
        except (*ETCD_ERRORS, StoreUnavailable, Exception):
            pass
