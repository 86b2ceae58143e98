"""``must_keep`` matching that outlives a short first budget finishes on low-priority threads.

A pattern that backtracks catastrophically ((x|xx)+y) is stopped at its request's deadline with a
clear error, but until then it burns a CPU core. Matched on the caller's thread, a client that sends
such patterns in a loop takes that core from every other request. Here each request's patterns run
on the caller's thread for their first :data:`QUICK_SECONDS` (an honest pattern is done in
microseconds to milliseconds); a match still running then is started again on a lane of threads
at the lowest CPU priority (Linux ``nice`` 19), which run when nothing else wants the core. The
deadline is unchanged, so an honest pattern that is slow on a long text is still answered, and a
catastrophic one still gets its error at the deadline, having cost other requests almost nothing.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

QUICK_SECONDS = 0.05  # a request's patterns run at normal priority this long
LANE_THREADS = 2

_lane: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _lowest_priority() -> None:
    """This thread (not the process) at nice 19, where the platform allows it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not permitted: the deadline still bounds it
        pass


def lane() -> ThreadPoolExecutor:
    """The shared low-priority threads, started on first use."""
    global _lane
    with _lock:
        if _lane is None:
            _lane = ThreadPoolExecutor(
                LANE_THREADS, thread_name_prefix="must-keep-slow", initializer=_lowest_priority
            )
        return _lane


def search(compiled, text: str, deadline: float, quick_until: float) -> bool:
    """Whether ``compiled`` (a ``regex`` pattern) matches somewhere in ``text``: on this thread
    until ``quick_until``, then on the low-priority lane until ``deadline`` (both
    ``time.monotonic()`` instants).

    Raises:
        TimeoutError: no answer by ``deadline``.
    """
    now = time.monotonic()
    if now < min(quick_until, deadline):
        try:
            return (
                compiled.search(text, timeout=min(quick_until, deadline) - now, concurrent=True) is not None
            )
        except TimeoutError:
            pass

    def slow() -> bool:
        left = deadline - time.monotonic()  # it may have waited for a lane thread
        if left <= 0:
            raise TimeoutError
        return compiled.search(text, timeout=left, concurrent=True) is not None

    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    future = lane().submit(slow)
    try:
        return future.result(timeout=left + 0.05)
    except TimeoutError:
        future.cancel()
        raise
