"""The store client: one etcd cluster reached through every member it lists, over TLS if asked.

Owns how a broker (and every tool of this repository) talks to etcd:

- ``metadata.etcd.endpoints``: every member's client address, ``host:port`` separated by
  commas. :class:`FailoverEtcdClient` talks to one member at a time and moves to the next
  when the one it uses fails: the connection is lost or refused, a call outlives its deadline
  (a paused or partitioned member), the member has no Raft leader (it is in a minority: every
  call and every stream carries etcd's ``hasleader`` requirement, so such a member refuses at
  once instead of serving stale reads or silent watches), or it is not serving (stopping,
  removed, a learner, an expired auth token).
- Reads and lease calls (grant, keepalive, revoke) are retried on the next member until their
  deadline. A write whose request may have reached a member before the failure raises
  :class:`WriteOutcomeUnknown`: it may or may not have been applied, and only a fresh read can
  tell (``metadata.etcd.writer`` resolves it so); a write refused before it was sent (no
  connection, no leader) is simply sent to the next member.
- Streams (the image's watch) are opened on the current member; when the client moves, the old
  member's channel is closed, its streams end with an error, and their owners re-open them on
  the new member from the revision they had applied.
- ``metadata.etcd.tls.ca.file`` (the CA that signed the members' server certificates),
  ``metadata.etcd.tls.cert.file`` / ``metadata.etcd.tls.key.file`` (a client certificate, for
  etcd's ``--client-cert-auth``) and ``metadata.etcd.username`` / ``metadata.etcd.password``
  (etcd's role-based authentication; the token is sent with every call, as etcdctl does).

Why not another library: aetcd 1.x dials one ``host:port`` and opens plaintext channels only;
no maintained asyncio client for Python 3.11 fails over between members (the Go client's
balancer does). :class:`EtcdClient` is aetcd's client with a TLS channel and the ``hasleader``
metadata (its private attributes are pinned by the ``aetcd<2`` requirement); the failover is
this module's, and nothing else in the repository opens an etcd channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aetcd
import grpc
import structlog
from aetcd import exceptions as etcd_errors
from aetcd import rpc, watcher
from aetcd.client import _handle_errors

__all__ = ["ETCD_ERRORS", "EtcdSecurity", "EtcdClient", "FailoverEtcdClient", "WriteOutcomeUnknown",
           "StoreUnavailable", "ChannelClosed", "parse_endpoints", "closed_under", "member_failed"]

log = structlog.get_logger("metadata.etcd.client")

ETCD_ERRORS = (etcd_errors.ClientError, grpc.aio.AioRpcError, OSError, asyncio.TimeoutError)
CALL_TIMEOUT_S = 5.0  # one call on one member; a member that takes longer is treated as failed
CLOSE_TIMEOUT_S = 2.0  # closing a channel waits on its watch stream's lock: never longer
# A member without a leader is asked again for this long before the client moves on: during an
# election every member has none for about a second, and moving would only churn channels; a
# member that stays without one is in a minority.
NO_LEADER_GRACE_S = 0.5
NO_LEADER_RETRY_S = 0.1

# Errors etcd (or gRPC) gives before a request reached Raft: a write refused with one of these
# was not applied, and may go to the next member as it is.
_NOT_SENT = ("no leader", "failed to connect", "connection refused", "not capable",
             "connect failed", "name resolution", "dns resolution")

T = TypeVar("T")
TRANSACTIONS = aetcd.client.Transactions()


class WriteOutcomeUnknown(Exception):
    """A write was sent and its answer lost: it may have been applied or not."""


class StoreUnavailable(Exception):
    """No member answered before the call's deadline."""


@dataclass(frozen=True)
class EtcdSecurity:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_config(cls, config) -> EtcdSecurity:
        def value(name: str) -> str | None:
            return config.get(name) or None
        return cls(value("metadata.etcd.tls.ca.file"), value("metadata.etcd.tls.cert.file"),
                   value("metadata.etcd.tls.key.file"), value("metadata.etcd.username"),
                   value("metadata.etcd.password"))

    @property
    def tls(self) -> bool:
        return bool(self.ca_file or self.cert_file)

    def check(self) -> None:
        """ValueError (one line) for a setting that cannot work."""
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("metadata.etcd.tls.cert.file and metadata.etcd.tls.key.file go together")
        if bool(self.username) != bool(self.password):
            raise ValueError("metadata.etcd.username and metadata.etcd.password go together")
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path:
                with open(path, "rb"):
                    pass

    def channel_credentials(self):
        def read(path: str | None) -> bytes | None:
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()
        return grpc.ssl_channel_credentials(root_certificates=read(self.ca_file),
                                            private_key=read(self.key_file), certificate_chain=read(self.cert_file))


def parse_endpoints(endpoints: str | list[str]) -> list[tuple[str, int]]:
    """``"h1:2379,h2:2379"`` (an ``http(s)://`` scheme is allowed and ignored) -> [(host, port)];
    ValueError (one line) for an empty list or a bad port."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        address = item.split("://", 1)[-1].rstrip("/")
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"metadata.etcd.endpoints: {item!r} is not host:port")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("metadata.etcd.endpoints names no member")
    return out


# Connection options: gRPC's default reconnect backoff grows to minutes, after which a lease
# would have expired before the channel tried again; keepalive pings find a dead peer in seconds.
CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100, "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 500, "grpc.keepalive_time_ms": 2000, "grpc.keepalive_timeout_ms": 2000,
    "grpc.keepalive_permit_without_calls": 1,
}


class EtcdClient(aetcd.Client):
    """aetcd's client for one member: TLS when configured, and every call marked ``hasleader``
    (etcd refuses it, and ends a stream, on a member that has lost its leader)."""

    def __init__(self, host: str, port: int, security: EtcdSecurity = EtcdSecurity(), **kwargs) -> None:
        kwargs.setdefault("timeout", CALL_TIMEOUT_S)
        kwargs.setdefault("options", CHANNEL_OPTIONS)
        super().__init__(host=host, port=port, username=security.username, password=security.password, **kwargs)
        self.security = security

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    @_handle_errors
    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:  # another task is connecting: wait for it, as aetcd does
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            options = self._options.items()
            self.channel = (rpc.secure_channel(self.address, self.security.channel_credentials(), options=options)
                            if self.security.tls else rpc.insecure_channel(self.address, options=options))
            metadata = [("hasleader", "true")]
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                resp = await self.auth_stub.Authenticate(
                    rpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout)
                metadata.append(("token", resp.token))
            self.metadata = tuple(metadata)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                            metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False


def _code(exc: BaseException) -> grpc.StatusCode | None:
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, grpc.aio.AioRpcError):
            return e.code()
    return None


class ChannelClosed(ConnectionError):
    """A call's channel was closed under it: the client moved to another member."""


def closed_under(exc: BaseException) -> BaseException:
    """gRPC answers a call whose channel was closed with CancelledError, as if the caller's
    task had been cancelled: that is re-raised; a call cut off by a member switch becomes
    :class:`ChannelClosed`, a member failure like any other."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return exc
    return ChannelClosed("the call's channel was closed (the client moved to another member)")


def member_failed(exc: BaseException) -> bool:
    """Whether ``exc`` says the member (or the way to it) is unusable, not the request."""
    if isinstance(exc, (asyncio.TimeoutError, OSError, etcd_errors.ConnectionFailedError,
                        etcd_errors.ConnectionTimeoutError, etcd_errors.UnauthenticatedError,
                        etcd_errors.WatchTimeoutError)):
        return True
    if isinstance(exc, etcd_errors.InternalError) and "from Core" in str(exc):
        return True  # gRPC's own: a call on a channel shut down under it
    return _code(exc) in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                          grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAUTHENTICATED)


def not_sent(exc: BaseException) -> bool:
    """Whether a failed request certainly did not reach Raft (so a write was not applied)."""
    text = str(exc).lower() + str(exc.__cause__ or "").lower()
    return any(marker in text for marker in _NOT_SENT)


class FailoverEtcdClient:
    """The members of one etcd cluster behind one client; see the module's docstring.

    ``generation`` counts the members used so far: a stream opened at one generation is over
    when it changes. ``on_switch(previous, now)`` is told of every move."""

    def __init__(self, endpoints: str | list[str], security: EtcdSecurity | None = None, *,
                 call_timeout: float = CALL_TIMEOUT_S, first: int = 0,
                 on_switch: Callable[[str, str], None] | None = None) -> None:
        self.endpoints = parse_endpoints(endpoints)
        self.seeds = list(self.endpoints)  # as configured: always kept, whatever the member list says
        self.security = security or EtcdSecurity()
        self.call_timeout = call_timeout
        self.transactions = TRANSACTIONS  # compare and operation builders, as aetcd's client has
        self._index = first % len(self.endpoints)
        self.generation = 0
        self.on_switch = on_switch
        self._member = self._client(self._index)
        self._closing: set[asyncio.Task] = set()
        self._leaderless_since: dict[str, float] = {}  # member address -> first "no leader" seen

    def _client(self, index: int) -> EtcdClient:
        host, port = self.endpoints[index]
        return EtcdClient(host, port, self.security, timeout=self.call_timeout)

    @property
    def address(self) -> str:
        """The member in use."""
        return self._member.address

    def switch(self, generation: int, reason: BaseException | str) -> None:
        """Move to the next member, unless another caller already moved on from ``generation``."""
        if generation != self.generation:
            return
        old = self._member
        self._index = (self._index + 1) % len(self.endpoints)
        self._member = self._client(self._index)
        self.generation += 1
        if len(self.endpoints) > 1:
            log.info("etcd_member_switched", previous=old.address, now=self._member.address,
                     reason=repr(reason)[:200])
        task = asyncio.get_running_loop().create_task(self._close_quietly(old))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        if self.on_switch is not None:
            self.on_switch(old.address, self._member.address)

    @staticmethod
    async def _close_quietly(member: EtcdClient) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(member.close(), CLOSE_TIMEOUT_S)

    async def close(self) -> None:
        await self._close_quietly(self._member)
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=CLOSE_TIMEOUT_S)

    # --- calls -------------------------------------------------------------------------------------

    async def call(self, op: Callable[[EtcdClient], Awaitable[T]], *, write: bool = False,
                   timeout: float | None = None, attempt_timeout: float | None = None) -> T:
        """``op`` on the member in use, moving to the next member on a member failure and trying
        again until ``timeout`` (default: one call timeout per member, at least two rounds of
        the members); one member gets ``attempt_timeout`` (default the call timeout). A
        ``write`` that may have been sent raises :class:`WriteOutcomeUnknown` instead of being
        sent again; :class:`StoreUnavailable` when no member answered."""
        budget = timeout if timeout is not None else self.call_timeout * max(2, len(self.endpoints))
        per_member = attempt_timeout or self.call_timeout
        deadline = time.monotonic() + budget
        last: BaseException | None = None
        tried = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StoreUnavailable(f"no etcd member of {self.describe()} answered within "
                                       f"{budget:.1f}s (last: {last!r})"[:400]) from last
            generation, member = self.generation, self._member
            try:
                try:
                    result = await asyncio.wait_for(self._run(member, op), min(remaining, per_member))
                except asyncio.CancelledError as cancelled:
                    raise closed_under(cancelled) from None
                self._leaderless_since.pop(member.address, None)
                return result
            except ETCD_ERRORS as exc:
                if not member_failed(exc):
                    raise
                last = exc
                if self._still_electing(member.address, exc):
                    await asyncio.sleep(min(NO_LEADER_RETRY_S, max(deadline - time.monotonic(), 0)))
                    continue
                if write and not not_sent(exc):
                    self.switch(generation, exc)
                    raise WriteOutcomeUnknown(f"{member.address}: {exc!r}"[:300]) from exc
                self.switch(generation, exc)
                tried += 1
                if tried % len(self.endpoints) == 0:  # every member failed once: do not spin
                    await asyncio.sleep(min(0.2 * (tried // len(self.endpoints)), 1.0, max(deadline - time.monotonic(), 0)))

    def _still_electing(self, address: str, exc: BaseException) -> bool:
        """Whether ``exc`` is "no leader" from a member that has had none for less than the grace."""
        if "no leader" not in f"{exc} {exc.__cause__ or ''}":
            return False
        since = self._leaderless_since.setdefault(address, time.monotonic())
        return time.monotonic() - since < NO_LEADER_GRACE_S

    @staticmethod
    async def _run(member: EtcdClient, op):
        await member.connect()
        return await op(member)

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    async def sync_endpoints(self) -> bool:
        """Add the client addresses the cluster's member list gives, and drop those of members
        no longer in it (the configured ones stay), as etcd's own client's AutoSync does: a member
        added later is used without a restart. True when the endpoints changed."""
        async def listing(m: EtcdClient):
            return await m.clusterstub.MemberList(rpc.MemberListRequest(), timeout=m._timeout, metadata=m.metadata)
        response = await self.call(listing)
        listed = parse_endpoints([u for m in response.members for u in m.clientURLs] or self.seeds)
        wanted = self.seeds + [e for e in listed if e not in self.seeds]
        if wanted == self.endpoints:
            return False
        current = self.endpoints[self._index]
        added = [e for e in wanted if e not in self.endpoints]
        removed = [e for e in self.endpoints if e not in wanted]
        self.endpoints = wanted
        if current in wanted:
            self._index = wanted.index(current)
        else:  # the member in use was removed from the cluster
            self._index = len(wanted) - 1
            self.switch(self.generation, "the member in use left the cluster")
        log.info("etcd_endpoints_synced", added=[f"{h}:{p}" for h, p in added],
                 removed=[f"{h}:{p}" for h, p in removed], endpoints=self.describe())
        return True

    # --- the calls the store makes ----------------------------------------------------------------

    async def get(self, key: bytes, timeout: float | None = None):
        return await self.call(lambda m: m.get(key), timeout=timeout)

    async def get_prefix(self, prefix: bytes, timeout: float | None = None):
        return await self.call(lambda m: m.get_prefix(prefix), timeout=timeout)

    async def transaction(self, compare: list, success: list, failure: list | None = None,
                          timeout: float | None = None, write: bool = True):
        """(succeeded, responses, header revision); :class:`WriteOutcomeUnknown` when it may
        have been applied. A transaction of reads only (``write=False``) is simply retried."""
        async def txn(m: EtcdClient):
            request = rpc.TxnRequest(compare=[c.build_message() for c in compare],
                                     success=m._ops_to_requests(success), failure=m._ops_to_requests(failure or []))
            try:
                response = await m.kvstub.Txn(request, timeout=m._timeout, metadata=m.metadata)
            except rpc.AioRpcError as e:
                etcd_errors._handle_exception(e)
            return response.succeeded, list(response.responses), response.header.revision
        return await self.call(txn, write=write, timeout=timeout)

    async def put(self, key: bytes, value: bytes, lease: int | None = None, timeout: float | None = None) -> int:
        """An unconditional put of a key only this broker writes (its own session and
        registration): sending it again is harmless, so a lost answer is retried. Returns the
        revision of the write."""
        async def put(m: EtcdClient):
            return (await m.put(key, value, lease=lease)).header.revision
        return await self.call(put, timeout=timeout)

    async def grant_lease(self, ttl: int, timeout: float | None = None) -> int:
        """A new lease's id. A grant whose answer is lost leaves an unused lease, which expires."""
        async def grant(m: EtcdClient):
            return (await m.lease(ttl)).id
        return await self.call(grant, timeout=timeout)

    async def refresh_lease(self, lease_id: int, timeout: float | None = None,
                            attempt_timeout: float | None = None) -> int:
        """One keepalive; the lease's remaining TTL (0 or less: it has expired)."""
        async def refresh(m: EtcdClient):
            reply = await m.refresh_lease(lease_id)
            return reply.TTL if reply is not None else 0
        return await self.call(refresh, timeout=timeout, attempt_timeout=attempt_timeout)

    async def revoke_lease(self, lease_id: int, timeout: float | None = None) -> bool:
        """Revoke a lease; False if it was gone already (expired, or revoked by an earlier try)."""
        async def revoke(m: EtcdClient):
            try:
                await m.revoke_lease(lease_id)
            except etcd_errors.ClientError as exc:
                if "lease not found" in str(exc):
                    return False
                raise
            return True
        return await self.call(revoke, timeout=timeout)

    async def watch_prefix(self, prefix: bytes, start_revision: int):
        """A watch on the member in use and that member's generation: the watch ends with an
        error if the member fails or the client moves to another one."""
        generation, member = self.generation, self._member
        try:
            try:
                await member.connect()
                watch = await asyncio.wait_for(member.watch_prefix(prefix, start_revision=start_revision),
                                               self.call_timeout)
            except asyncio.CancelledError as cancelled:
                raise closed_under(cancelled) from None
        except ETCD_ERRORS as exc:
            if member_failed(exc):
                self.switch(generation, exc)
            raise
        return watch, generation

    async def status(self, timeout: float | None = None):
        """The member in use's Raft status (leader id, term, index)."""
        async def status(m: EtcdClient):
            return await m.maintenancestub.Status(rpc.StatusRequest(), timeout=m._timeout, metadata=m.metadata)
        return await self.call(status, timeout=timeout)

