"""One error type for everything the user can fix, and its translation from JVM exceptions.

Owns: ``PipelineError`` (a one-line message, printed without a traceback by the CLI) and
``translate`` (Py4J / Spark exceptions of the known cases -> one line). Known limit: an
exception not matched here is reduced to its first line, which may still be Java-flavoured.
"""

from __future__ import annotations

import re


class PipelineError(Exception):
    """A failure with a message fit for one line of output."""


# (pattern in the Java exception text, message template); the first match wins.
_KNOWN: list[tuple[str, str]] = [
    (r"UnknownTopicOrPartition|Topic (\S+) not present in metadata|does not exist",
     "a topic the job reads or writes does not exist on the broker"),
    (r"Timeout of \d+ms expired before the position|TimeoutException: Timed out waiting for a node|"
     r"Failed to construct kafka consumer|DisconnectException",
     "the broker is unreachable from Spark (check --bootstrap-servers)"),
    (r"AccessDeniedException|Permission denied|Mkdirs failed|not a directory|NotDirectory|"
     r"FileAlreadyExistsException|ParentNotDirectory",
     "the checkpoint directory cannot be written"),
    (r"OffsetOutOfRange|were lost|Some data may have been lost",
     "input records the checkpoint points at are gone (deleted or truncated)"),
    (r"ProducerFenced|fenced", "another instance of this job is running with the same checkpoint"),
]


def _text(exc: BaseException) -> str:
    parts = [str(exc)]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            parts.append(str(java.toString()))
        except Exception:  # the JVM may already be gone
            pass
    desc = getattr(exc, "desc", None)
    if desc:
        parts.append(str(desc))
    return "\n".join(parts)


def first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return "unknown error"


def translate(exc: BaseException, context: str = "") -> PipelineError:
    """Map a Spark/Py4J exception to one clear line; unknown ones keep their first line."""
    if isinstance(exc, PipelineError):
        return exc
    text = _text(exc)
    for pattern, message in _KNOWN:
        if re.search(pattern, text, re.IGNORECASE):
            detail = first_line(text)
            return PipelineError(f"{context}{message} ({detail})" if context else f"{message} ({detail})")
    return PipelineError(f"{context}{first_line(text)}")
