"""DescribeClientQuotas: v0-1

Behavior:
- There are no client quotas on this broker (nothing enforces them and AlterClientQuotas is not
  served), so a valid filter matches nothing: no error and an empty entry list, which is what
  Kafka answers when no quota is set.
- The filter is checked as Kafka 4.3.1 checks it (answers compared with a real one): entity
  types are ``user``, ``client-id`` and ``ip``, another is UNSUPPORTED_VERSION; an empty or
  repeated entity type, an exact match without a name and an ``ip`` component combined with
  ``user`` or ``client-id`` are INVALID_REQUEST, each with Kafka's message. A success carries
  an empty error message, as Kafka's does.

Version notes:
- v1 is flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..server import RequestContext

ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT = 0


@register(48, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext, request) -> dict:
    problem = _filter_problem(request.components)
    if problem:
        code, message = problem
        return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}
    return {"throttle_time": 0, "error_code": 0, "error_message": "", "entries": []}


def _filter_problem(components) -> tuple[ErrorCode, str] | None:
    seen = set()
    for c in components:
        if not c.entity_type:
            return ErrorCode.invalid_request, "Invalid empty entity type."
        if c.entity_type in seen:
            return ErrorCode.invalid_request, f"Entity type {c.entity_type} cannot appear more than once in the filter."
        if c.entity_type not in ENTITY_TYPES:
            return ErrorCode.unsupported_version, f"Unsupported entity type {c.entity_type}"
        if c.match_type == MATCH_EXACT and c.match is None:
            return ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null."
        seen.add(c.entity_type)
    if "ip" in seen and len(seen) > 1:
        return ErrorCode.invalid_request, ("Invalid entity filter component combination. IP filter "
                                           "component should not be used with user or clientId filter component.")
    return None
