"""Ctrl-C for tests: SIGINT to this process while the main thread is inside a call."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest


def interrupted_within(call: Callable[[], object], delay: float) -> float:
    """Runs `call` on this (the main) thread, sends SIGINT after `delay` seconds, and returns
    how long after the signal KeyboardInterrupt came out of it. Fails the test when the call
    ended some other way."""
    sent: list[float] = []

    def interrupt() -> None:
        time.sleep(delay)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Thread(target=interrupt)
    ended: object = None
    try:
        t.start()
        try:
            call()
        except KeyboardInterrupt:
            caught = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported below
            ended = e
        else:
            ended = "a return"
        if ended is not None:
            # The signal still comes; take it here rather than in the test runner.
            try:
                t.join(timeout=10)
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass
    finally:
        t.join(timeout=10)
        signal.signal(signal.SIGINT, previous)
    if ended is not None:
        pytest.fail(f"the call ended with {ended!r} before SIGINT could interrupt it")
    latency = caught - sent[0]
    print(f"KeyboardInterrupt {latency * 1000:.1f} ms after SIGINT")
    return latency
