"""The API registry: which API keys and versions this broker speaks.

Handlers register themselves with :func:`register` (key, min, max); ApiVersions is generated
from the registry, so what is advertised is exactly what is implemented. The flexible-version
threshold of each API (where request header v2 and tagged fields begin) comes from kio's
generated schemas, which mirror Kafka's JSON message definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

API_VERSIONS_KEY = 18


@dataclass(slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Callable[..., Any]
    # Versions accepted on the wire but refused with an error (Produce v0-2, as Kafka 4.x).
    refused_below: int = 0
    # Answers a refused version from the raw frame: (frame, body_offset, version) -> body.
    legacy: Callable[[bytes, int, int], bytes] | None = None
    # A last version Kafka marks unstable: served (and advertised) only with
    # ``unstable.api.versions.enable``, as Kafka's ApiVersions leaves it out otherwise.
    unstable_max: int | None = None

    def top(self, unstable: bool) -> int:
        """The highest version served: ``unstable_max`` when unstable versions are enabled."""
        return self.unstable_max if unstable and self.unstable_max is not None else self.max_version


REGISTRY: dict[int, ApiSpec] = {}


def camel_name(name: str) -> str:
    """kio's ``init_producer_id`` -> Kafka's ``InitProducerId`` (as in Kafka's metric tags)."""
    return "".join(part.capitalize() for part in name.split("_"))


def register(key: int, min_version: int, max_version: int, *, refused_below: int = 0,
             legacy: Callable[[bytes, int, int], bytes] | None = None, unstable_max: int | None = None):
    """Decorator: register ``handler`` as the implementation of API ``key``."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY[key] = ApiSpec(key, camel_name(api_key_map[key]), min_version, max_version, handler,
                                refused_below, legacy, unstable_max)
        return handler

    return wrap


@cache
def request_class(key: int, version: int) -> type:
    return _payload_class(key, version, EntityType.request)


@cache
def response_class(key: int, version: int) -> type:
    return _payload_class(key, version, EntityType.response)


def _payload_class(key: int, version: int, entity_type: EntityType) -> type:
    module = load_payload_module(key, version, entity_type)
    path = schema_name_map[api_key_map[key]][version][entity_type]
    return getattr(module, path.split(":", 1)[1])


@cache
def is_flexible(key: int, version: int) -> bool:
    try:
        return bool(request_class(key, version).__flexible__)
    except Exception:  # versions older than kio's schemas (e.g. Produce v0-2) are not flexible
        return False


def request_header_version(key: int, version: int) -> int:
    return 2 if is_flexible(key, version) else 1


def response_header_version(key: int, version: int) -> int:
    # ApiVersions always answers with header v0 so that a client can parse the reply
    # before it knows which versions the broker speaks (KIP-511).
    if key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(key, version) else 0
