"""Kafka error codes.

kio's ``ErrorCode`` is an ``IntEnum`` generated from Kafka's own error table (with the
retriable flag), so it is the single source of truth; this module re-exports it and adds
the exceptions that carry a code through the broker's layers.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "InvalidRequest"]


class KafkaError(Exception):
    """A failure that maps to one Kafka error code in a response."""

    def __init__(self, code: ErrorCode, message: str | None = None,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
        # KIP-467: (batch index, message) of each refused record, sent with Produce v8+.
        self.record_errors = record_errors or []


class InvalidRequest(Exception):
    """A request that Kafka answers by closing the connection (unreadable, unknown key)."""
