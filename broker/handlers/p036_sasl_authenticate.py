"""SaslAuthenticate: v0-2

Behavior:
- Carries one token of the mechanism chosen by SaslHandshake each way (PLAIN and OAUTHBEARER:
  one round, or two when OAUTHBEARER answers an invalid token with its error challenge; SCRAM:
  two). When the mechanism completes, the connection's principal becomes
  ``User:<name>`` and every API is served from then on.
- Wrong credentials: SASL_AUTHENTICATION_FAILED with Kafka's generic message (it never says
  whether the user exists); the connection closes after
  ``connection.failed.authentication.delay.ms``. A request out of turn (no handshake yet, or
  after authentication): ILLEGAL_SASL_STATE.
- Re-authentication (KIP-368, after a SaslHandshake on an authenticated connection): the same
  exchange; a different mechanism or principal, or a credential deleted since, fails it as
  above, and the connection closes.

Version notes:
- v1 adds ``session_lifetime_ms``: ``connections.max.reauth.ms`` of the listener and mechanism
  (0: the session never expires); v0 clients cannot re-authenticate and are closed when the
  session ends, as Kafka does. v2 is flexible.
"""

from __future__ import annotations

import datetime

from protocol.api import register
from protocol.errors import ErrorCode
from security.sasl import AuthenticationFailed, SaslState

from ..request_context import RequestContext

NO_LIFETIME = datetime.timedelta(0)


def _answer(code: int, message: str | None = None, token: bytes = b"", lifetime_ms: int = 0) -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": token,
            "session_lifetime": datetime.timedelta(milliseconds=lifetime_ms) if lifetime_ms else NO_LIFETIME}


@register(36, 0, 2)
async def handle_sasl_authenticate(ctx: RequestContext, request) -> dict:
    connection = ctx.connection
    sasl = getattr(connection, "sasl", None)
    if sasl is None or sasl.state is not SaslState.AUTHENTICATE:
        return _answer(ErrorCode.illegal_sasl_state, "SaslAuthenticate request received out of turn")
    reauthenticating = sasl.reauthenticating is not None
    try:
        token = sasl.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        connection.authentication_failed(f"{exc}: {exc.detail}" if exc.detail else str(exc))
        return _answer(ErrorCode.sasl_authentication_failed, str(exc))
    if not sasl.complete:
        return _answer(ErrorCode.none, None, token)
    lifetime_ms = sasl.session_lifetime_ms
    connection.authenticated(sasl.principal, lifetime_ms, reauthenticating)
    return _answer(ErrorCode.none, None, token, lifetime_ms)
