"""SaslHandshake: v0-1

Behavior:
- On a SASL_PLAINTEXT or SASL_SSL listener, before authentication: picks the mechanism for the
  SaslAuthenticate exchange that follows. A mechanism the listener does not enable answers
  UNSUPPORTED_SASL_MECHANISM; every answer lists the enabled mechanisms
  (``sasl.enabled.mechanisms``), as Kafka's ``SaslServerAuthenticator`` does.
- On an authenticated connection it starts a re-authentication (KIP-368; the connection has
  let it through), which must then use the same mechanism.
- Anywhere else (a listener without SASL, a handshake out of turn, or a re-authentication
  within a second of the previous one): ILLEGAL_SASL_STATE.

Version notes:
- v1: the tokens travel in SaslAuthenticate requests, as every current client sends them.
- v0 (clients before Kafka 1.0): each token is a bare size-prefixed frame each way (the
  connection reads them so, :meth:`KafkaConnection._raw_sasl_token`).
"""

from __future__ import annotations

from protocol.api import register
from protocol.errors import ErrorCode
from security.sasl import SaslState

from ..request_context import RequestContext


@register(17, 0, 1)
async def handle_sasl_handshake(ctx: RequestContext, request) -> dict:
    sasl = getattr(ctx.connection, "sasl", None)
    if sasl is None or sasl.state is not SaslState.HANDSHAKE_OR_VERSIONS:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}
    mechanisms = tuple(sasl.config.mechanisms)
    if not sasl.handshake(request.mechanism, ctx.api_version):
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": mechanisms}
    return {"error_code": ErrorCode.none, "mechanisms": mechanisms}
