"""All partition logs of a broker under its log directory, and their checkpoint files.

Owns: creating, opening (with recovery), deleting and closing logs; the
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` files; the clean-shutdown marker; retention passes; the
exclusive ``.lock`` on the directory (as Kafka takes it), held from construction to ``close``,
so a second broker on the same directory refuses to start instead of sharing it. The lock file
names its holder (pid and an owner string, the broker's incarnation id); whoever takes the lock
next learns who had it last, and that it is gone: the lock goes with its process, even on kill -9.

A storage error in the directory (an OSError of a log's I/O, a checkpoint, a new partition's
directory) takes it offline through the failure channel (:mod:`.log_dir_failure`): every log in
it refuses further I/O with KAFKA_STORAGE_ERROR.

Differs from Kafka: one log directory per broker (``log.dirs`` names one; JBOD is not
supported); a deleted partition's directory is renamed ``<topic>-<p>.<uuid>-delete`` and
removed in the background.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import shutil
import threading
import time
import uuid

import structlog

from .checkpoint import read_checkpoint, write_checkpoint
from .log import Log, LogConfig
from .log_dir_failure import LogDirFailureChannel

log = structlog.get_logger("storage.log_manager")

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def sync_file_system(path: str) -> None:
    """syncfs(2) on the file system holding ``path`` (Linux); sync(2) where it is missing."""
    syncfs = getattr(_libc(), "syncfs", None)
    if syncfs is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


class LogDirInUse(Exception):
    """Another process holds the log directory's lock."""


def lock_log_dir(log_dir: str, owner: str = "") -> tuple[int, str]:
    """Take the directory's exclusive lock and write our pid and ``owner`` in it; answer its fd
    and the owner the previous holder wrote ("" if none). LogDirInUse naming the holder's pid
    if another process has it."""
    fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    previous = os.pread(fd, 256, 0).decode(errors="replace").split()  # "<pid> [<owner>]"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = previous[0] if previous else "unknown"
        os.close(fd)
        raise LogDirInUse(f"log directory {os.path.abspath(log_dir)} is in use by another broker "
                          f"(pid {holder}); stop it or give this one another log.dirs") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {owner}".rstrip().encode() + b"\n", 0)
    return fd, previous[1] if len(previous) > 1 else ""


class LogManager:
    def __init__(self, log_dir: str, replicated: bool = False, owner: str = "",
                 failure: LogDirFailureChannel | None = None) -> None:
        self.log_dir = log_dir
        self.failure = failure or LogDirFailureChannel()
        self.failure.listeners.insert(0, self._taken_offline)
        # Replicated: the high watermark is what the checkpoint says, not the log end offset.
        self.replicated = replicated
        os.makedirs(log_dir, exist_ok=True)
        self._lock_fd: int | None
        # The last owner of this directory, now gone (its lock is ours): a broker's previous life.
        self._lock_fd, self.previous_owner = lock_log_dir(log_dir, owner)
        # A directory with nothing in it has nothing to recover: not an unclean shutdown.
        self.is_new = not any(name != LOCK_FILE for name in os.listdir(log_dir))
        self.logs: dict[tuple[str, int], Log] = {}
        self._recovery_points = read_checkpoint(self._path(RECOVERY_POINT_FILE))
        self._log_starts = read_checkpoint(self._path(LOG_START_FILE))
        self._high_watermarks = read_checkpoint(self._path(HIGH_WATERMARK_FILE))
        self.had_clean_shutdown = self.is_new or os.path.exists(self._path(CLEAN_SHUTDOWN_FILE))
        # Until the broker runs (mark_unclean), every log on disk is as the clean shutdown left
        # it: flushed, indexes whole. A log opened later may have been closed uncleanly since.
        self._logs_as_shut_down = self.had_clean_shutdown and not self.is_new
        self._checkpoint_lock = threading.Lock()
        self._checkpointed: dict[str, dict[tuple[str, int], int]] = {}  # file -> what was last written

    def _path(self, name: str) -> str:
        return os.path.join(self.log_dir, name)

    # --- a failed directory ----------------------------------------------------------------------

    @property
    def offline(self) -> bool:
        return self.failure.is_offline(self.log_dir)

    def storage_failed(self, operation: str, exc: OSError) -> Exception:
        """An OSError of this directory's I/O: the directory goes offline; the error to raise."""
        return self.failure.fail(self.log_dir, operation, exc)

    def _taken_offline(self, log_dir: str, reason: str) -> None:
        if log_dir == self.log_dir:
            for plog in list(self.logs.values()):
                plog.offline = (log_dir, reason)

    def _adopt(self, plog: Log) -> Log:
        plog.on_storage_error = self.storage_failed
        if self.offline:
            plog.offline = (self.log_dir, self.failure.offline[self.log_dir])
        self.logs[(plog.topic, plog.partition)] = plog
        return plog

    def partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.log_dir, f"{topic}-{partition}")

    def existing_partitions(self) -> list[tuple[str, int]]:
        out = []
        for name in os.listdir(self.log_dir):
            m = _PARTITION_DIR.match(name)
            if m and os.path.isdir(self._path(name)):
                out.append((m.group(1), int(m.group(2))))
        return sorted(out)

    def open_log(self, topic: str, partition: int, config: LogConfig) -> Log:
        key = (topic, partition)
        if key in self.logs:
            return self.logs[key]
        directory = self.partition_dir(topic, partition)
        if self.offline:
            raise self.storage_failed("open", OSError(f"{self.log_dir} is offline"))
        if not os.path.exists(directory):
            try:
                return self._adopt(Log.create(directory, topic, partition, config))
            except FileExistsError:  # made meanwhile: open it as any other
                pass
            except OSError as exc:
                raise self.storage_failed("log creation", exc) from exc
        started = time.monotonic()
        plog, report = Log.open(directory, topic, partition, config,
                                recovery_point=self._recovery_points.get(key, 0),
                                clean_shutdown=self._logs_as_shut_down,
                                log_start_offset=self._log_starts.get(key, 0),
                                high_watermark=self._high_watermarks.get(key, 0) if self.replicated else None)
        if report.segments_scanned or report.bytes_truncated:
            # One line per partition only when recovery cut something off; progress is reported
            # by the caller (ReplicaManager.open_assigned).
            (log.warning if report.bytes_truncated else log.debug)("log_loaded", topic=topic, partition=partition,
                     log_end_offset=plog.log_end_offset, segments_recovered=report.segments_scanned,
                     bytes_truncated=report.bytes_truncated,
                     ms=round((time.monotonic() - started) * 1000, 1))
        return self._adopt(plog)

    def mark_unclean(self) -> None:
        """Remove the clean-shutdown marker once the broker is running."""
        self._logs_as_shut_down = False
        try:
            os.unlink(self._path(CLEAN_SHUTDOWN_FILE))
        except FileNotFoundError:
            pass

    def delete_log(self, topic: str, partition: int) -> None:
        plog = self.logs.pop((topic, partition), None)
        if plog is not None:
            plog.close(clean=False)
        src = self.partition_dir(topic, partition)
        if os.path.isdir(src):
            dst = f"{src}.{uuid.uuid4().hex}-delete"
            os.rename(src, dst)
            shutil.rmtree(dst, ignore_errors=True)

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and high-watermark checkpoints; one whose
        entries are what this manager last wrote is left as it is (an idle broker with
        thousands of partitions rewrote and fsynced three unchanged files a minute). Called
        from the periodic pass's worker thread and at close: one at a time."""
        if self.offline:
            return
        logs = list(self.logs.items())
        with self._checkpoint_lock:
            for name, entries in ((RECOVERY_POINT_FILE, {k: lg.recovery_point for k, lg in logs}),
                                  (LOG_START_FILE, {k: lg.log_start_offset for k, lg in logs}),
                                  (HIGH_WATERMARK_FILE, {k: lg.high_watermark for k, lg in logs})):
                if self._checkpointed.get(name) != entries:
                    try:
                        write_checkpoint(self._path(name), entries)
                    except OSError as exc:
                        raise self.storage_failed(f"{name} checkpoint", exc) from exc
                    self._checkpointed[name] = entries

    def apply_retention(self) -> int:
        if self.offline:
            return 0
        deleted = 0
        now_ms = int(time.time() * 1000)
        for plog in list(self.logs.values()):
            deleted += plog.apply_retention(now_ms)
        return deleted

    def remove_expired_producers(self) -> int:
        """Forget the producers idle for ``producer.id.expiration.ms`` with no open
        transaction (Kafka's periodic producer expiration check); how many."""
        now_ms = int(time.time() * 1000)
        return sum(plog.producer_state.remove_expired(now_ms) for plog in list(self.logs.values()))

    def close(self) -> None:
        if self.offline:  # nothing more is written there, least of all a clean-shutdown marker
            self.release()
            return
        # One sync of the file system for all logs: three fsyncs per partition took 30-45 s
        # for 10000 partitions here, the kernel's writeback of the same data a fraction of it.
        for plog in self.logs.values():
            plog.close(clean=True, fsync=False)
        sync_file_system(self.log_dir)
        self.checkpoint()
        with open(self._path(CLEAN_SHUTDOWN_FILE), "w"):
            pass
        self.release()

    def release(self) -> None:
        """Give up the directory's lock (after close, or when start-up fails)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
