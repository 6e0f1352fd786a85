"""The threads on which redmutex.asyncio makes its network calls.

concurrent.futures.ThreadPoolExecutor starts a thread in submit(), on the caller's thread, and
Thread.start() waits until the new thread has taken the GIL and run: a hundred acquires begun at
once by tasks of one loop held that loop for 10 to 45 ms. Here the loop's thread only queues a
call and wakes a thread; a starter thread of the pool starts the threads, one for each queued
call that no idle thread will take, up to the pool's size. Threads stay for later calls.

The pool's threads are the low-level _thread module's: starting one does not wait for it to
run, and it runs no Python code before taking its first call, so a hundred threads starting
together compete less with the loop for the GIL. Being none of threading's, they are not
joined at exit: the pool waits for its calls instead (an atexit function).
"""

from __future__ import annotations

import _thread
import atexit
import collections
import concurrent.futures
import os
import threading
import typing

_T = typing.TypeVar("_T")
# A queued call: its future, the callable and its arguments.
_Call = typing.Tuple[
    "concurrent.futures.Future[typing.Any]", typing.Callable[..., typing.Any], typing.Tuple[typing.Any, ...]
]


class Pool:
    """At most `size` threads running submitted calls, started off the submitting thread."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one thread, not {size}")
        self._size = size
        self._name = name
        self._reset()
        # Calls queued or running as the interpreter exits still complete: a release or a
        # discarded grant sent as the loop ended reaches Redis.
        atexit.register(self._drain)
        # A child of fork() has none of the parent's threads, and the parent's calls are not
        # its own: it starts afresh.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        # The pool's threads wait here for a call; the starter waits for a call no idle
        # thread will take; at exit, the interpreter waits for the queue to empty.
        self._queued_call = threading.Condition(self._lock)
        self._short = threading.Condition(self._lock)
        self._quiet = threading.Condition(self._lock)
        self._queue: collections.deque[_Call] = collections.deque()
        self._idle = 0  # threads waiting for a call (a woken one counts until it takes it)
        self._starting = 0  # threads started, not waiting for a call yet
        self._threads = 0
        self._running = 0
        self._starter: threading.Thread | None = None

    def submit(
        self, call: typing.Callable[..., _T], *args: typing.Any
    ) -> concurrent.futures.Future[_T]:
        """Queues `call(*args)`; the future has its result. Never waits for a thread.

        The call runs even when the future's waiter gives up (an awaiting task that is
        cancelled cancels the future it awaits): the future is running from the start, so it
        cannot be cancelled. A release still reaches Redis, and an acquisition whose task went
        away ends through its Canceller."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        starter = None
        with self._lock:
            self._queue.append((future, call, args))
            if self._idle > 0:
                self._queued_call.notify()
            if self._wanted():
                self._short.notify()
                if self._starter is None:
                    self._starter = starter = threading.Thread(
                        target=self._start_threads, name=f"{self._name}-starter", daemon=True
                    )
        if starter is not None:
            # Once per process, the first time a call finds no thread.
            starter.start()
        return future

    def _wanted(self) -> bool:
        """Whether a queued call finds no thread to take it and the pool may grow (locked)."""
        return len(self._queue) > self._idle + self._starting and self._threads < self._size

    def _start_threads(self) -> None:
        with self._lock:
            while True:
                while not self._wanted():
                    self._short.wait()
                self._threads += 1
                self._starting += 1
                self._lock.release()
                try:
                    _thread.start_new_thread(self._serve, ())
                except BaseException as e:  # no thread to be had (the interpreter is exiting)
                    self._lock.acquire()
                    self._threads -= 1
                    self._starting -= 1
                    if not self._threads:
                        # Nobody would run the queued calls: they fail.
                        while self._queue:
                            self._queue.popleft()[0].set_exception(e)
                        self._quiet.notify_all()
                    self._short.wait()  # until another call comes
                else:
                    self._lock.acquire()

    def _serve(self) -> None:
        self._lock.acquire()
        self._starting -= 1
        while True:
            self._idle += 1
            while not self._queue:
                self._queued_call.wait()
            self._idle -= 1
            future, call, args = self._queue.popleft()
            self._running += 1
            self._lock.release()
            try:
                try:
                    result = call(*args)
                except BaseException as e:
                    future.set_exception(e)
                else:
                    future.set_result(result)
                del future, call, args
            finally:
                self._lock.acquire()
                self._running -= 1
                if not self._queue and not self._running:
                    self._quiet.notify_all()

    def _drain(self) -> None:
        with self._lock:
            while self._queue or self._running:
                self._quiet.wait()
