"""A log directory that fails: its storage errors reported once, the directory taken offline.

Owns Kafka's LogDirFailureChannel: an I/O error (ENOSPC, EIO, EROFS, a failed fsync, ...) in
an append, a segment roll, a flush, a truncation, a retention pass or a checkpoint takes the
directory offline, once: every log in it refuses further writes and reads with
KAFKA_STORAGE_ERROR (a write after a failed one could land past a torn record), and the
broker's listener is told (``broker.broker``: with no directory left online, the broker ends
its session at once, so that the controller moves its leaderships, and halts, as Kafka's
does). The operation that failed answers KAFKA_STORAGE_ERROR, which clients retry elsewhere.

Differs from Kafka: a broker has one log directory (JBOD is not supported), so a failed
directory always halts the broker; Kafka 4.4 keeps serving from its other directories.
"""

from __future__ import annotations

import errno
import functools
import threading
from collections.abc import Callable

import structlog

from protocol.errors import ErrorCode, KafkaError

__all__ = ["LogDirFailureChannel", "storage_operation"]

log = structlog.get_logger("storage.log_dir_failure")


def storage_error(log_dir: str, reason: str) -> KafkaError:
    return KafkaError(ErrorCode.kafka_storage_error, f"Log directory {log_dir} is offline: {reason}"[:300])


class LogDirFailureChannel:
    """Offline directories and the listeners told of each (``listener(log_dir, reason)``, from
    whichever thread hit the error)."""

    def __init__(self) -> None:
        self.offline: dict[str, str] = {}
        self.listeners: list[Callable[[str, str], None]] = []
        self._lock = threading.Lock()

    def fail(self, log_dir: str, operation: str, exc: OSError) -> KafkaError:
        """Take ``log_dir`` offline (the first time) and return the error to answer with."""
        reason = f"{operation} failed: {exc.strerror or exc}"
        with self._lock:
            first = log_dir not in self.offline
            if first:
                self.offline[log_dir] = reason
        if first:
            log.error("log_dir_offline", log_dir=log_dir, operation=operation,
                      errno=errno.errorcode.get(exc.errno or 0), error=str(exc)[:300])
            for listener in self.listeners:
                listener(log_dir, reason)
        return storage_error(log_dir, self.offline[log_dir])

    def is_offline(self, log_dir: str) -> bool:
        return log_dir in self.offline


def storage_operation(operation: str):
    """A :class:`~storage.log.Log` method that does I/O: refused on an offline log; an OSError
    takes the log's directory offline (when the log belongs to a directory with a failure
    channel) and is answered KAFKA_STORAGE_ERROR."""
    def wrap(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            if self.offline is not None:
                raise storage_error(self.offline[0], self.offline[1])
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                if self.on_storage_error is None:
                    raise
                raise self.on_storage_error(operation, exc) from exc
        return run
    return wrap
