"""A broker's session: its registration, the lease that says it lives, and the keepalive.

Owns ``brokers/<node.id>`` (the registration) and ``alive/<node.id>`` (the session, under a
lease of ``broker.session.timeout.ms``, kept alive every third of it), as a KRaft broker's
registration and heartbeats:

- A broker registers fenced (``"<incarnation> fenced"``) and unfences itself once its logs are
  open and its previous life is fenced (:meth:`BrokerSession.unfence`).
- A second live process with the same node.id is refused while the other's session lasts, as
  KRaft refuses a duplicate registration. A restart whose log directory lock names the
  holder's incarnation (the previous life of this very broker, whose process is gone) revokes
  that lease at once rather than waiting it out.
- The keepalive goes to whichever member the store client uses and moves with it: a failed
  keepalive moves the client to the next member and is sent again there, within the same
  third of the TTL, so the session outlives the loss of any member while a quorum remains
  (etcd's new leader extends every lease when it takes over). A session found expired (the
  broker was cut off from a quorum longer than the TTL) registers again.
- :attr:`BrokerSession.connected` says whether the last keepalive was answered
  (``kbroker_etcd_connected``); :meth:`BrokerSession.end` revokes the session at once (a broker
  that halts on a failed log directory is fenced now, not a session timeout later).

Differs from Kafka: the session is an etcd lease, not heartbeats to the controller; a broker
whose registration is removed while it runs registers again at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from ..records import BrokerRegistration
from .client import ETCD_ERRORS, FailoverEtcdClient, StoreUnavailable, WriteOutcomeUnknown
from .keys import FENCED_SESSION, KeySpace, dumps, registration_json

__all__ = ["BrokerSession", "RegistrationConflict"]

log = structlog.get_logger("metadata.etcd.session")


class RegistrationConflict(Exception):
    """Another live process holds this node.id."""


class BrokerSession:
    def __init__(self, client: FailoverEtcdClient, keys: KeySpace, node_id: int, ttl_s: int,
                 on_connectivity: Callable[[bool], None] | None = None) -> None:
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self.ttl = ttl_s
        self.lease_id: int | None = None
        self.registration: BrokerRegistration | None = None
        self.fenced = True  # unfenced once ready to lead (unfence())
        self.connected = True
        self.on_connectivity = on_connectivity
        self.lease_listeners: list[Callable[[], None]] = []  # the session was lost and made again
        self.last_renewed = time.monotonic()

    @property
    def alive_key(self) -> bytes:
        return self.keys.key("alive", self.node_id)

    def _alive_value(self) -> bytes:
        return (self.registration.incarnation_id + (FENCED_SESSION if self.fenced else "")).encode()

    # --- registration ---------------------------------------------------------------------------------

    async def register(self, registration: BrokerRegistration, wait_s: float, predecessor: str = "") -> None:
        """Put ``alive/<id>`` under a fresh lease and the registration beside it. A session of
        ``predecessor`` (this broker's previous life, known dead) is ended at once; any other
        holder's lease is waited out, then refused with :class:`RegistrationConflict`."""
        self.registration = registration
        key, t = self.alive_key, self.client.transactions
        deadline = time.monotonic() + wait_s
        while True:
            lease = await self.client.grant_lease(self.ttl)
            try:
                ok, _responses, _revision = await self.client.transaction(
                    [t.version(key) == 0],
                    [t.put(key, self._alive_value(), lease=lease),
                     t.put(self.keys.key("brokers", registration.node_id), dumps(registration_json(registration)))])
            except WriteOutcomeUnknown:
                holder = await self.client.get(key)  # ours if the registration was applied
                ok = holder is not None and holder.lease == lease
            if ok:
                self.lease_id = lease
                self.last_renewed = time.monotonic()
                log.info("broker_registered", node_id=registration.node_id, lease_ttl_s=self.ttl,
                         incarnation_id=registration.incarnation_id, member=self.client.address)
                return
            await self._revoke_quietly(lease)
            holder = await self.client.get(key)
            if holder is not None and predecessor and await self._end_predecessor_session(holder, predecessor):
                predecessor = ""  # ended once: whoever holds the session next is someone else
                continue
            if time.monotonic() >= deadline:
                raise RegistrationConflict(
                    f"node.id {registration.node_id} is already registered by a live broker "
                    f"({holder.value.decode() if holder else '?'}); stop it or choose another node.id")
            log.info("waiting_for_previous_registration", node_id=registration.node_id,
                     holder=holder.value.decode() if holder else None)
            await asyncio.sleep(0.5)

    async def _end_predecessor_session(self, holder, predecessor: str) -> bool:
        """Revoke the lease of a session that is this broker's previous life: a quick restart
        after a crash is noticed now, not when that lease expires (Kafka waits it out, answering
        DUPLICATE_BROKER_REGISTRATION meanwhile). The controller sees the session end and moves
        the leaderships it held, as it would have on expiry."""
        incarnation = holder.value.decode().removesuffix(FENCED_SESSION)
        if incarnation != predecessor or not holder.lease:
            return False
        await self.client.revoke_lease(holder.lease)  # already gone: the next attempt registers
        log.info("previous_session_ended", node_id=self.node_id, incarnation_id=incarnation,
                 reason="this broker's previous life is gone: its log directory lock was free")
        return True

    async def unfence(self) -> None:
        """The broker is ready to lead (its logs open, its previous life fenced): its session
        says so, and the controller may elect it from now on."""
        self.fenced = False
        await self.client.put(self.alive_key, self._alive_value(), lease=self.lease_id)
        log.info("broker_unfenced", node_id=self.node_id, incarnation_id=self.registration.incarnation_id)

    async def update_registration(self, **changes) -> None:
        for k, v in changes.items():
            setattr(self.registration, k, v)
        await self.put_registration()

    async def put_registration(self) -> None:
        await self.client.put(self.keys.key("brokers", self.node_id), dumps(registration_json(self.registration)))

    async def reregister(self) -> None:
        """The registration was removed while this broker runs: put it back."""
        log.warning("broker_registration_removed_while_alive", node_id=self.node_id, action="registering again")
        try:
            await self.put_registration()
        except (*ETCD_ERRORS, StoreUnavailable) as exc:
            log.warning("broker_reregistration_failed", node_id=self.node_id, error=repr(exc))

    # --- keepalive ------------------------------------------------------------------------------------

    async def keepalive_loop(self) -> None:
        interval = max(self.ttl / 3, 0.3)
        while True:
            await asyncio.sleep(interval)
            try:
                # On as many members as it takes within half the TTL (the client moves on a
                # failure), each given most of an interval: a paused member is left in time,
                # a member slow on a loaded machine is not left for nothing.
                ttl = await self.client.refresh_lease(self.lease_id, timeout=self.ttl / 2,
                                                      attempt_timeout=max(interval * 0.75, 0.5))
                if ttl <= 0:
                    log.warning("broker_lease_expired", node_id=self.node_id,
                                since_last_renewal_s=round(time.monotonic() - self.last_renewed, 3),
                                action="registering again")
                    await self.register(self.registration, self.ttl * 2 + 2)
                    for listener in self.lease_listeners:
                        listener()
                self.last_renewed = time.monotonic()
                self._set_connected(True)
            except (*ETCD_ERRORS, StoreUnavailable, WriteOutcomeUnknown) as exc:
                self._set_connected(False, exc)
            except Exception:
                log.exception("lease_keepalive_failed")

    def _set_connected(self, connected: bool, error: BaseException | None = None) -> None:
        if connected != self.connected:
            self.connected = connected
            if connected:
                log.info("etcd_reachable_again", node_id=self.node_id, member=self.client.address)
            else:
                log.warning("etcd_unreachable", node_id=self.node_id, error=repr(error)[:300],
                            members=self.client.describe(),
                            note="serving on the last known metadata; no leadership changes")
            if self.on_connectivity is not None:
                self.on_connectivity(connected)

    # --- the end ---------------------------------------------------------------------------------------

    async def end(self, timeout: float = 2.0) -> None:
        """Revoke the session now: the controller fences this broker at once."""
        lease, self.lease_id = self.lease_id, None
        if lease is not None:
            await self._revoke_quietly(lease, timeout)

    async def _revoke_quietly(self, lease: int, timeout: float = 2.0) -> None:
        try:
            await self.client.revoke_lease(lease, timeout=timeout)
        except (*ETCD_ERRORS, StoreUnavailable, Exception):
            pass
