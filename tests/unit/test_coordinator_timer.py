"""The coordinators' fake clock (coordinator/runtime.py ``ManualTimer``): timers fire in
deadline order only when the test advances time, cancelled ones never, due-now ones at the
loop's next turn; what a callback schedules fires in the same advance when it is due. The
coordinators' periodic jobs run on it too."""

from __future__ import annotations

import asyncio

from coordinator.runtime import BackgroundTasks, LoopTimer, ManualTimer
from tests.support.loop import settle


async def test_timers_fire_in_deadline_order_when_time_is_advanced():
    timer, fired = ManualTimer(), []
    timer.schedule(300, fired.append, "c")
    timer.schedule(100, fired.append, "a")
    cancelled = timer.schedule(150, fired.append, "never")
    timer.schedule(200, lambda: (fired.append("b"), timer.schedule(50, fired.append, "b+50")))
    cancelled.cancel()
    assert timer.advance(99) == 0 and fired == []
    assert timer.advance(151) == 3 and fired == ["a", "b", "b+50"]
    assert timer.pending == 1 and timer.now_ms == 250
    timer.advance(50)
    assert fired == ["a", "b", "b+50", "c"] and timer.pending == 0


async def test_a_timer_due_now_fires_at_the_next_turn_on_both_clocks():
    for timer in (ManualTimer(), LoopTimer()):
        fired = []
        timer.schedule(0, fired.append, 1)
        timer.schedule(0, fired.append, 2).cancel()
        assert fired == []
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert fired == [1]


async def test_periodic_jobs_run_when_the_clock_passes_each_interval_and_survive_a_failure():
    timer, runs = ManualTimer(), []

    async def job():
        runs.append(timer.now_ms)
        if len(runs) == 1:
            raise RuntimeError("the first pass fails; the next goes ahead")

    tasks = BackgroundTasks("test", timer)
    tasks.every(1000, job)
    await settle()
    assert timer.advance(999) == 0 and runs == []
    timer.advance(1)
    await settle()
    assert runs == [1000]
    timer.advance(2500)  # one pass however far the clock jumps: the next is due an interval after it ran
    await settle()
    assert runs == [1000, 3500]
    assert timer.advance(999) == 0
    timer.advance(1)
    await settle()
    assert runs == [1000, 3500, 4500]
    await tasks.stop()
    assert len(tasks) == 0 and timer.pending == 0
