"""ShareFetch: v1-2 (KIP-932)

Behavior:
- Share session first (``coordinator/share/manager.py``): epoch 0 opens one for (group,
  member), replacing the member's previous session (acknowledgements on epoch 0 are
  INVALID_REQUEST); a later epoch must equal the session's (INVALID_SHARE_SESSION_EPOCH), a
  missing session is SHARE_SESSION_NOT_FOUND, too many sessions SHARE_SESSION_LIMIT_REACHED;
  epoch -1 applies the acknowledgements and closes the session without fetching. These
  errors are top-level, with no partitions.
- Piggy-backed acknowledgements are applied before fetching; each partition's result is its
  ``acknowledge_error_code`` (INVALID_RECORD_STATE for records not acquired by the member).
- The session's partitions (those of this and earlier requests, minus forgotten ones) are
  fetched in turn, starting one further each request: each share-partition acquires up to
  ``max_records`` (whole batches) within ``max_bytes``, and the answer carries the acquired
  batches with their ``acquired_records`` ranges and delivery counts, and
  ``acquisition_lock_timeout`` (the group's lock duration).
- A share-partition fetched here for the first time loads its state (the share coordinator's,
  else ``share.auto.offset.reset``) in the background, as Kafka's INITIALIZING state: the
  fetch acquires from the partitions that are loaded and does not wait for the others.
- Long poll: while fewer than ``min_bytes`` were acquired, waits up to ``max_wait_ms``,
  woken by new data, by records becoming available again (release, lock expiry) and by a
  share-partition finishing its load. A fetch whose session ends meanwhile (its client
  disconnected) completes without acquiring.
- An unknown topic id is UNKNOWN_TOPIC_ID, a partition not led here NOT_LEADER_OR_FOLLOWER
  with ``current_leader`` and ``node_endpoints`` (KIP-951).
- A session answers with the partitions that have records, an error or an acknowledgement
  result (all requested partitions on epoch 0).
- With an authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED) and on each topic
  (else TOPIC_AUTHORIZATION_FAILED for its partitions, fetch and acknowledgements alike).

Version notes:
- v0 (Kafka 4.0 early access) was removed in 4.1; v1 is the stable KIP-932 version.
- v2 adds ``share_acquire_mode`` (record-limit mode is answered as batch-optimized: whole
  batches) and RENEW acknowledgements (KIP-1222): a request with ``is_renew_ack`` only renews
  locks, it acquires nothing; RENEW in v1 is INVALID_REQUEST for that partition.
"""

import asyncio
import time

from coordinator.share.manager import FINAL_EPOCH
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from .. import share_requests as sr
from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(78, 1, 2)
async def handle_share_fetch(ctx: RequestContext, request) -> dict:
    services = ctx.services
    manager = services.share_manager
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return _error_response(ErrorCode.group_authorization_failed, None)
    acks = {(t.topic_id, p.partition_index): sr.ack_batches(p)
            for t in request.topics for p in t.partitions if p.acknowledgement_batches}
    try:
        session = manager.open_session(group_id, member_id, request.share_session_epoch, ctx.connection,
                                       acknowledging=bool(acks))
    except KafkaError as exc:
        return _error_response(exc.code, exc.message)
    lock_ms = manager.share_config(group_id).record_lock_duration_ms
    renew_allowed = ctx.api_version >= 2
    results: dict[tuple, dict] = {}
    for (topic_id, index), batches in acks.items():
        code = ErrorCode.topic_authorization_failed if sr.unreadable_topic(ctx, topic_id) else \
            await sr.acknowledge(services, group_id, member_id, topic_id, index, batches, renew_allowed)
        results[(topic_id, index)] = _partition(services, topic_id, index, ack_code=code)
    if request.share_session_epoch == FINAL_EPOCH:
        manager.close_session(session)
        return _response(ctx, results, lock_ms)
    _update_session(services, session, request)
    requested = {(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions}
    if request.share_session_epoch == 0:
        for topic_id, index in requested:
            results.setdefault((topic_id, index), _partition(services, topic_id, index))
    if getattr(request, "is_renew_ack", False):
        return _response(ctx, results, lock_ms)
    await _fetch(ctx, request, session, results)
    return _response(ctx, results, lock_ms)


def _update_session(services, session, request) -> None:
    for t in request.topics:
        name = sr.topic_name(services, t.topic_id)
        for p in t.partitions:
            session.partitions[(t.topic_id, p.partition_index)] = name
    for t in request.forgotten_topics_data:
        for index in t.partitions:
            session.partitions.pop((t.topic_id, index), None)


async def _fetch(ctx: RequestContext, request, session, results: dict) -> None:
    """Acquire from the session's partitions, long-polling until ``min_bytes`` or the wait ends."""
    pending = _PendingShareFetch(ctx, request, session, results)
    deadline = time.monotonic() + request.max_wait.total_seconds()
    while not pending.try_complete():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await pending.wait(remaining)


class _PendingShareFetch:
    """One ShareFetch until it completes (Kafka's DelayedShareFetch).

    ``try_complete`` acquires from the session's loaded partitions, starting one further each
    request. It runs when the request arrives, when a waited-on partition gets records (new
    data, a release, a lock expiry) and, synchronously, when one of its partitions finishes
    loading: like Kafka's purgatory, the answer then carries what was acquirable at that
    moment, so partitions loading one after another are answered one after another.
    """

    def __init__(self, ctx: RequestContext, request, session, results: dict) -> None:
        self.ctx, self.request, self.session, self.results = ctx, request, session, results
        keys = list(session.partitions)
        if keys:
            shift = session.epoch % len(keys)
            keys = keys[shift:] + keys[:shift]
        self.keys = keys
        self.budget = {"records": request.max_records, "bytes": request.max_bytes}
        self.acquired_bytes = 0
        self.done = False
        self.waitable: list = []
        self.loading: list = []

    def try_complete(self) -> bool:
        if self.done:
            return True
        services, manager = self.ctx.services, self.ctx.services.share_manager
        if not manager.is_open(self.session):
            # The client went away while the fetch waited: acquire nothing for a session
            # whose records were already released (the answer is dropped anyway).
            self.done = True
            return True
        self.waitable, self.loading, errors = [], [], 0
        for topic_id, index in self.keys:
            if self.budget["records"] <= 0 or self.budget["bytes"] <= 0:
                break
            try:
                if sr.unreadable_topic(self.ctx, topic_id):
                    raise KafkaError(ErrorCode.topic_authorization_failed, None)
                name, part = sr.leader_partition(services, topic_id, index)
                sp = manager.ready(self.session.group_id, name, topic_id, index, part.log, part.leader_epoch)
                got = sp and manager.acquire((self.session.group_id, topic_id, index), self.session.member_id,
                                             part.log, self.budget["records"], self.budget["bytes"])
            except KafkaError as exc:
                errors += 1
                _merge(self.results, services, topic_id, index, error=exc)
                continue
            if got and got.ranges:
                self.budget["records"] -= got.count
                self.budget["bytes"] -= len(got.records)
                self.acquired_bytes += len(got.records)
                _merge(self.results, services, topic_id, index, acquisition=got)
            else:
                self.waitable.append(part)
                if sp is None:
                    self.loading.append((self.session.group_id, topic_id, index))
        self.done = (self.acquired_bytes >= max(self.request.min_bytes, 1) or bool(errors)
                     or not self.waitable)
        return self.done

    async def wait(self, timeout_s: float) -> None:
        """Until a waited-on partition has records or finishes loading, or the timeout."""
        fut = asyncio.get_running_loop().create_future()
        manager = self.ctx.services.share_manager

        def loaded() -> None:
            if not fut.done() and self.try_complete():
                fut.set_result(None)

        loading, waitable = list(self.loading), list(self.waitable)   # try_complete replaces them
        for key in loading:
            manager.add_load_listener(key, loaded)
        try:
            await self.ctx.services.replica_manager.wait_for_data(waitable, timeout_s, fut)
        finally:
            for key in loading:
                manager.remove_load_listener(key, loaded)


def _partition(services, topic_id, index: int, *, code: int = 0, message: str | None = None,
               ack_code: int = 0) -> dict:
    return {"topic_id": topic_id, "partition_index": index, "error_code": code, "error_message": message,
            "acknowledge_error_code": ack_code, "acknowledge_error_message": None,
            "current_leader": sr.current_leader(services, topic_id, index, code),
            "records": b"", "acquired_records": []}


def _merge(results: dict, services, topic_id, index: int, *, error: KafkaError | None = None,
           acquisition=None) -> None:
    entry = results.get((topic_id, index))
    if entry is None:
        entry = results[(topic_id, index)] = _partition(services, topic_id, index)
    if error is not None:
        entry["error_code"] = int(error.code)
        entry["error_message"] = error.message
        entry["current_leader"] = sr.current_leader(services, topic_id, index, error.code)
    if acquisition is not None:
        entry["records"] += acquisition.records
        entry["acquired_records"] += [{"first_offset": r.first_offset, "last_offset": r.last_offset,
                                       "delivery_count": r.delivery_count} for r in acquisition.ranges]


def _response(ctx: RequestContext, results: dict, lock_ms: int) -> dict:
    topics: dict = {}
    leaders = set()
    for entry in results.values():
        topic_id = entry.pop("topic_id")
        topics.setdefault(topic_id, []).append(entry)
        if entry["error_code"] == ErrorCode.not_leader_or_follower:
            leaders.add(entry["current_leader"]["leader_id"])
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout": lock_ms,
            "responses": [{"topic_id": t, "partitions": parts} for t, parts in topics.items()],
            "node_endpoints": sr.node_endpoints(ctx.services, leaders, ctx.listener)}


def _error_response(code: int, message: str | None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout": 0,
            "responses": [], "node_endpoints": []}
