"""Kafka error codes.

kio's ``ErrorCode`` is an ``IntEnum`` generated from Kafka's own error table (with the
retriable flag and, as each member's docstring, Kafka's message for it), so it is the single
source of truth; this module re-exports it, reads those messages (``error_description``: what
Kafka answers where a response carries ``Errors.message()``) and adds the exceptions that carry
a code through the broker's layers.
"""

from __future__ import annotations

import ast
import inspect
from functools import cache

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "InvalidRequest", "error_description"]


@cache
def _error_descriptions() -> dict[str, str]:
    """Kafka's description of each error code: the docstrings of kio's generated enum."""
    try:
        tree = ast.parse(inspect.getsource(ErrorCode))
    except (OSError, TypeError, SyntaxError):
        return {}
    out: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []

    def walk(stmts: list[ast.stmt]) -> None:
        last = None
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                walk(stmt.body)
                last = None
            elif isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                last = stmt.targets[0].id
            elif (last and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                  and isinstance(stmt.value.value, str)):
                out[last] = " ".join(stmt.value.value.split())
                last = None
            else:
                last = None

    walk(body)
    return out


def error_description(code: int) -> str | None:
    """Kafka's message for ``code`` (``Errors.message()``), e.g. 80: "The preferred leader was
    not available."; None for an unknown code."""
    try:
        return _error_descriptions().get(ErrorCode(code).name)
    except ValueError:
        return None


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
