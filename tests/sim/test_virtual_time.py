"""The simulated-time loop: timers jump, code and threads cost no simulated time, nothing leaks.

None of these tests reads a wall clock: a loop that really slept would make them hang (a
simulated day of sleeping), not fail an assertion on elapsed time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gymbench.sim.virtual import VirtualTimeLoop, run_in_simulated_time

DAY_S = 86_400.0


def test_sleep_moves_the_clock_by_exactly_the_delay() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = [loop.time()]
        await asyncio.sleep(10)
        seen.append(loop.time())
        await asyncio.sleep(3 * DAY_S)  # longer than asyncio's longest selector wait (one day)
        seen.append(loop.time())
        return seen

    assert run_in_simulated_time(main()) == [0.0, 10.0, 10.0 + 3 * DAY_S]


def test_timers_fire_in_order_at_their_simulated_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []

        async def after(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            fired.append((name, loop.time()))

        loop.call_at(2.5, lambda: fired.append(("call_at", loop.time())))
        await asyncio.gather(after("three", 3), after("one", 1), after("two", 2))
        return fired

    assert run_in_simulated_time(main()) == [("one", 1.0), ("two", 2.0), ("call_at", 2.5), ("three", 3.0)]


def test_timeouts_expire_in_simulated_time() -> None:
    async def main() -> float:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout=7)
        return asyncio.get_running_loop().time()

    assert run_in_simulated_time(main()) == 7.0


def test_code_on_the_loop_costs_no_simulated_time() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        sum(i * i for i in range(200_000))
        await asyncio.sleep(0)
        return before, loop.time()

    before, after = run_in_simulated_time(main())
    assert before == after == 0.0


def test_the_clock_stands_still_while_an_executor_job_runs() -> None:
    """A pending timer must not be jumped to while a thread works: its result comes first."""

    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        order: list[tuple[str, float]] = []

        async def timer() -> None:
            await asyncio.sleep(5)
            order.append(("timer", loop.time()))

        pending = asyncio.ensure_future(timer())
        with ThreadPoolExecutor(1) as pool:
            await loop.run_in_executor(pool, time.sleep, 0.05)
        order.append(("thread", loop.time()))
        await pending
        return order

    assert run_in_simulated_time(main()) == [("thread", 0.0), ("timer", 5.0)]


def test_a_default_executor_job_reads_the_state_at_the_moment_it_is_handed_over() -> None:
    """``asyncio.to_thread(counters.read)`` in a thread would read after as many of the instant's
    other callbacks as the machine's load let run meanwhile (a tune stopped at another level on a
    busy CI runner); inline, it reads what the loop held when it was called, on any machine."""

    async def main() -> tuple[int, int, int]:
        count = 0

        async def bump() -> None:
            nonlocal count
            for _ in range(5000):
                count += 1
                await asyncio.sleep(0)

        bumping = asyncio.ensure_future(bump())
        await asyncio.sleep(0)
        handed_over = count

        def slow_read() -> int:
            time.sleep(0.05)  # a thread's read, which the bumps would overtake
            return count

        read = await asyncio.to_thread(slow_read)
        await bumping
        return handed_over, read, count

    handed_over, read, final = run_in_simulated_time(main())
    assert read == handed_over < final == 5000


def test_a_default_executor_job_s_exception_reaches_its_caller() -> None:
    async def main() -> str:
        try:
            await asyncio.to_thread(int, "not a number")
        except ValueError as exc:
            return str(exc)
        return "no error"

    assert "invalid literal" in run_in_simulated_time(main())


def test_with_no_timer_the_loop_waits_for_real_events() -> None:
    """Nothing to jump to: a callback from another thread is waited for, not skipped."""

    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()
        threading.Timer(0.05, loop.call_soon_threadsafe, (answer.set_result, "late")).start()
        return await answer, loop.time()

    assert run_in_simulated_time(main()) == ("late", 0.0)


def test_leftover_tasks_are_cancelled_and_the_loop_closed() -> None:
    leftovers: list[asyncio.Task[None]] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> str:
        loops.append(asyncio.get_running_loop())
        leftovers.append(asyncio.ensure_future(asyncio.Event().wait()))  # type: ignore[arg-type]
        await asyncio.sleep(1)
        return "done"

    assert run_in_simulated_time(main()) == "done"
    assert leftovers[0].cancelled()
    assert isinstance(loops[0], VirtualTimeLoop) and loops[0].is_closed()


def test_exceptions_propagate() -> None:
    async def main() -> None:
        await asyncio.sleep(1)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_in_simulated_time(main())
