"""``request_percentage`` (KIP-124, broker/quotas.py): what :class:`RequestTime` counts of a
handler (its steps, not its waits; cancellation passes through) and the throttle the quota
answers for it, capped at one sample as Kafka's ClientRequestQuotaManager."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.quotas import REQUEST, WINDOW_S, RequestTime, request_quota_manager
from metadata.controller.client_quotas import entity_key


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _handler(busy: float, idle: float) -> str:
    _spin(busy / 2)
    await asyncio.sleep(idle)  # waiting (replication, long poll) holds no thread
    _spin(busy / 2)
    return "answer"


def test_request_time_counts_the_steps_not_the_waits():
    timer = RequestTime()

    async def main():
        return await timer.run(_handler(0.02, 0.2))

    started = time.perf_counter()
    assert asyncio.run(main()) == "answer"
    assert time.perf_counter() - started >= 0.2
    assert 0.02 <= timer.busy < 0.1


def test_a_cancelled_handler_sees_its_cancellation():
    timer, seen = RequestTime(), []

    async def handler():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main():
        task = asyncio.ensure_future(timer.run(handler()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_take_hands_out_each_part_of_the_time_once():
    timer = RequestTime()
    timer.add(0.5)
    assert timer.take() == pytest.approx(0.5)
    timer.add(0.25)
    assert timer.take() == pytest.approx(0.25) and timer.take() == 0


def test_the_request_quota_throttles_by_percent_of_a_thread_and_at_most_one_sample():
    now = [1000.0]
    stored = {entity_key((("client-id", "busy"),)): {REQUEST: 10.0}}  # a tenth of one thread
    m = request_quota_manager(lambda: stored, lambda: now[0])
    assert m.record("u", "busy", 0.5 * 100) == 0  # 0.5 s of a 10 s window: 5 %
    # 1.5 s over 10 s is 15 %: (15 - 10) / 10 * 10 s = 5 s, capped at one 1 s sample.
    assert m.record("u", "busy", 1.0 * 100) == int(WINDOW_S * 1000)
    assert m.record("u", "other", 100 * 100) == 0  # no quota for this client
