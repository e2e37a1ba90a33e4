"""SaslAuthenticate: v0-2

Behavior:
- Carries one token of the mechanism chosen by SaslHandshake each way (PLAIN: one round;
  SCRAM: two). When the mechanism completes, the connection's principal becomes
  ``User:<name>`` and every API is served from then on.
- Wrong credentials: SASL_AUTHENTICATION_FAILED with Kafka's generic message (it never says
  whether the user exists); the connection closes after
  ``connection.failed.authentication.delay.ms``. A request out of turn (no handshake yet, or
  after authentication): ILLEGAL_SASL_STATE.

Version notes:
- v1 adds ``session_lifetime_ms``: 0 here (no re-authentication, KIP-368, yet); v2 is flexible.
"""

from __future__ import annotations

import datetime

from protocol.api import register
from protocol.errors import ErrorCode
from security.sasl import AuthenticationFailed, SaslState

from ..request_context import RequestContext

NO_LIFETIME = datetime.timedelta(0)


def _answer(code: int, message: str | None = None, token: bytes = b"") -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": NO_LIFETIME}


@register(36, 0, 2)
async def handle_sasl_authenticate(ctx: RequestContext, request) -> dict:
    connection = ctx.connection
    sasl = getattr(connection, "sasl", None)
    if sasl is None or sasl.state is not SaslState.AUTHENTICATE:
        return _answer(ErrorCode.illegal_sasl_state, "SaslAuthenticate request received out of turn")
    try:
        token = sasl.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        connection.authentication_failed(str(exc))
        return _answer(ErrorCode.sasl_authentication_failed, str(exc))
    if sasl.complete:
        connection.authenticated(sasl.principal)
    return _answer(ErrorCode.none, None, token)
