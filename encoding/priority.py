"""The encoder's threads below the rest of the process in the operating system's scheduler.

On two cores the encoder's threads and the event loop (parsing requests, searching small
indexes, writing answers) share the same CPUs. Under a storm of long texts the encoder keeps
both cores busy, and every request's plumbing waits behind it. Linux keeps a nice value per
thread, so the encoder's threads can run a few steps nicer than the rest: the scheduler then
gives the event loop the CPU whenever it is ready, and the encoder every cycle it leaves. The
encoder loses nothing when the rest is idle.

A thread inherits the nice value of the thread that starts it, so an inference session built
in a lowered thread starts its own worker threads (ONNX Runtime's intra-op pool) lowered too;
the thread that calls the session takes part in its work and is lowered where it starts
(:func:`lower_thread_priority` as a thread pool's initializer).

Raising a thread's nice value needs no privilege; it is relative to the value the process
runs at, capped at 19. Elsewhere than Linux the nice value belongs to the whole process, so
nothing is changed there.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

MAX_NICE = 19
"""The nicest value Linux schedules."""


def per_thread() -> bool:
    """Whether this platform keeps a nice value per thread (Linux)."""
    return sys.platform.startswith("linux")


def lower_thread_priority(steps: int) -> None:
    """This thread ``steps`` nice values below where it runs (capped at 19); nothing with 0
    steps or where nice values are not per thread."""
    if steps <= 0 or not per_thread():
        return
    thread = threading.get_native_id()
    current = os.getpriority(os.PRIO_PROCESS, thread)
    os.setpriority(os.PRIO_PROCESS, thread, min(MAX_NICE, current + steps))


def made_at_lower_priority(make: Callable[[], T], steps: int) -> T:
    """``make()`` run in a new thread ``steps`` nice values lower, so that the threads it
    starts (an inference session's pool) run lowered too; its exception is raised here."""
    if steps <= 0 or not per_thread():
        return make()
    made: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            lower_thread_priority(steps)
            made.append(make())
        except BaseException as exc:  # raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="encoder-setup")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]
