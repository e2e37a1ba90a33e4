"""Helpers for unit tests that drive asyncio code on a fake clock."""

from __future__ import annotations

import asyncio


async def settle(rounds: int = 50) -> None:
    """Let the tasks started so far run up to their next wait (no time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
