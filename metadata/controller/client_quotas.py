"""Client quotas (KIP-546): what AlterClientQuotas stores and DescribeClientQuotas reports.

Owns the checks of an alteration and the filter of a description, as Kafka 4.3.1's
``ClientQuotaControlManager`` (alterClientQuotas, validateEntity, configKeysForEntityType,
validateQuotaKeyValue) and ``ClientQuotasImage.describe``; the messages are Kafka's.

An entity is a set of (entity type, name) with types ``user``, ``client-id`` and ``ip``; a
``None`` name is the type's default entity. Quotas live in the cluster metadata as
``{entity key: {quota key: value}}`` where the entity key is :func:`entity_key` (JSON of the
sorted pairs), so every broker of a cluster sees the same quotas and they survive restarts.

The byte rates (``producer_byte_rate``, ``consumer_byte_rate``), ``request_percentage`` and
``controller_mutation_rate`` are enforced by ``broker/quotas.py``, ``connection_creation_rate``
(per IP) by ``broker/connection_quotas.py``.
"""

from __future__ import annotations

import ipaddress
import json
import math
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from protocol.errors import ErrorCode

from ..image import MetadataCache
from . import settled

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# Kafka's QuotaConfig: the keys of user / client-id entities and of ip entities, by type.
USER_CLIENT_KEYS = {"producer_byte_rate": "LONG", "consumer_byte_rate": "LONG",
                    "request_percentage": "DOUBLE", "controller_mutation_rate": "DOUBLE"}
IP_KEYS = {"connection_creation_rate": "INT"}
_INTEGRAL_MAX = {"INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG")}

Entity = tuple[tuple[str, str | None], ...]  # sorted (type, name) pairs
Quotas = dict[str, dict[str, float]]         # entity key -> quota key -> value


def entity_key(entity: Entity) -> str:
    return json.dumps([list(pair) for pair in sorted(entity)])


def entity_of(key: str) -> Entity:
    return tuple((t, n) for t, n in json.loads(key))


def response_entity(entity: Entity) -> list[dict]:
    """The entity's components in the order Kafka's answers list them (client-id before user)."""
    order = {CLIENT_ID: 0, USER: 1, IP: 2}
    return [{"entity_type": t, "entity_name": n}
            for t, n in sorted(entity, key=lambda pair: (order.get(pair[0], 3), pair[0]))]


def _entity_text(entity: Entity) -> str:
    """Kafka's ``ClientQuotaEntity.toString``."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


@dataclass(slots=True)
class Outcome:
    entity: Entity
    error_code: int = ErrorCode.none
    error_message: str | None = None


def _resolvable(host: str) -> bool:
    """Kafka's ``InetAddress.getByName`` check: an IP literal, or a name that resolves."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)
        return True
    except (OSError, UnicodeError):
        return False


def _check_entity(components: Iterable[tuple[str, str | None]]) -> tuple[dict[str, str | None], str | None]:
    """validateEntity + configKeysForEntityType: (entity map, error message or None)."""
    entity: dict[str, str | None] = {}
    for entity_type, name in components:
        entity[entity_type] = name  # a repeated type: the last one counts (the request's map)
    if not entity:
        return entity, "Invalid empty client quota entity"
    for entity_type, name in entity.items():
        if entity_type not in ENTITY_TYPES:
            return entity, f"Unhandled client quota entity type: {entity_type}"
        if name is not None and name == "":
            return entity, f"Empty {entity_type} not supported"
    if IP in entity:
        if USER in entity or CLIENT_ID in entity:
            return entity, ("Invalid quota entity combination, IP entity shouldnot be combined with "
                            "User or ClientId")
        if entity[IP] is not None and not _resolvable(entity[IP]):
            return entity, f"{entity[IP]} is not a valid IP or resolvable host."
    return entity, None


def _check_value(keys: Mapping[str, str], key: str, value: float) -> str | None:
    """validateQuotaKeyValue."""
    value_type = keys.get(key)
    if value_type is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if value_type == "DOUBLE":
        return None
    limit, name = _INTEGRAL_MAX[value_type]
    if value > limit:
        return f"Proposed value for {key} is too large for {name}."
    if abs(math.fmod(value, 1.0)) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def plan_alterations(current: Mapping[str, Mapping[str, float]], entries) -> tuple[Quotas, list[Outcome]]:
    """The changes (entity key -> its whole new quota map, empty = removed) and one outcome per
    distinct entity, in request order. ``entries`` are AlterClientQuotas request entries.

    As Kafka: a key given twice makes the entity's answer "Ignoring duplicate entity" (the
    "Duplicate quota key" error is overwritten) and nothing of it is applied; an entity given
    twice keeps what its first entry did and answers "Ignoring duplicate entity"; a bad value
    fails its entity only; removing a key that is not set is no change."""
    changes: Quotas = {}
    outcomes: dict[Entity, Outcome] = {}
    for entry in entries:
        entity_map, problem = _check_entity((c.entity_type, c.entity_name) for c in entry.entity)
        entity: Entity = tuple(sorted(entity_map.items()))
        ops: dict[str, float | None] = {}
        duplicate_key = False
        for op in entry.ops:
            if op.key in ops:
                duplicate_key = True
            else:
                ops[op.key] = None if op.remove else float(op.value)
        if duplicate_key or entity in outcomes:
            outcomes[entity] = Outcome(entity, ErrorCode.invalid_request,
                                       f"Ignoring duplicate entity {_entity_text(entity)}")
            continue
        if problem:
            outcomes[entity] = Outcome(entity, ErrorCode.invalid_request, problem)
            continue
        keys = IP_KEYS if IP in entity_map else USER_CLIENT_KEYS
        key = entity_key(entity)
        quotas = dict(changes.get(key, current.get(key, {})))
        error = None
        for name, value in ops.items():
            if value is None:
                quotas.pop(name, None)
            else:
                error = _check_value(keys, name, value)
                if error:
                    break
                quotas[name] = value
        if error:
            outcomes[entity] = Outcome(entity, ErrorCode.invalid_request, error)
            continue
        if quotas != dict(current.get(key, {})):
            changes[key] = quotas
        outcomes[entity] = Outcome(entity)
    return changes, list(outcomes.values())


class FilterError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def parse_filter(components) -> tuple[dict[str, str | None], set[str]]:
    """ClientQuotasImage.describe's checks: (exact matches by type, types matched by presence)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise FilterError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in specified:
            raise FilterError(ErrorCode.invalid_request,
                              f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in ENTITY_TYPES:
            raise FilterError(ErrorCode.unsupported_version, f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise FilterError(ErrorCode.invalid_request,
                                  "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise FilterError(ErrorCode.invalid_request,
                                  "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise FilterError(ErrorCode.invalid_request,
                                  "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(c.entity_type)
        else:
            raise FilterError(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (set(exact) | specified)):
        raise FilterError(ErrorCode.invalid_request,
                          "Invalid entity filter component combination. IP filter component should not "
                          "be used with user or clientId filter component.")
    return exact, specified


def describe(quotas: Mapping[str, Mapping[str, float]], components, strict: bool) -> list[dict]:
    """The entries matching the filter (raises :class:`FilterError`), as Kafka's image: with
    no component, every entity unless ``strict``; ``strict`` keeps entities with exactly the
    filtered types."""
    exact, specified = parse_filter(components)
    if not exact and not specified and strict:
        return []
    entries = []
    for key, values in quotas.items():
        entity = dict(entity_of(key))
        if strict and len(entity) != len(exact) + len(specified):
            continue
        if any(t not in entity or entity[t] != name for t, name in exact.items()):
            continue
        if any(t not in entity for t in specified):
            continue
        entries.append({"entity": response_entity(tuple(entity.items())),
                        "values": [{"key": k, "value": v} for k, v in values.items()]})
    return entries


class ClientQuotaControlManager:
    """AlterClientQuotas: the entries checked against the image's quotas, the changed entities
    written together."""

    def __init__(self, image: MetadataCache, store) -> None:
        self.image = image
        self.store = store

    async def alter(self, entries, validate_only: bool = False) -> list[Outcome]:
        changes, outcomes = plan_alterations(self.image.client_quotas, entries)
        if changes and not validate_only:
            await settled(self.store.alter_client_quotas(changes))
        return outcomes
