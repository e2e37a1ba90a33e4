"""Compatibility suites a run could not run, said once at the end of the run's summary.

A suite whose pinned source is neither cached, nor in a snapshot, nor downloadable here
(:class:`compat.sources.SuiteUnavailable`) is skipped with the reason; the skip alone is one
line among many, so the session's summary ends with one line naming every such suite.
"""

from __future__ import annotations

import pytest

UNAVAILABLE = pytest.StashKey[dict]()


def note_unavailable(config: pytest.Config, suite: str, exc: Exception) -> str:
    """Remember ``suite`` for the summary; returns the reason to skip with."""
    config.stash.setdefault(UNAVAILABLE, {}).setdefault(suite, str(exc))
    return str(exc)


def summary_line(config: pytest.Config) -> str | None:
    suites = config.stash.get(UNAVAILABLE, {})
    if not suites:
        return None
    return ("compatibility suites NOT RUN (their pinned tests could not be fetched here): "
            + "; ".join(f"{suite}: {reason}" for suite, reason in sorted(suites.items())))
