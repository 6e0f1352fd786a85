"""The nightly invoice job, started at once on three workers: exactly one sends the invoices.

    python examples/python/nightly_invoice.py [redis://127.0.0.1:6379]

The Redis URL comes from the first argument, else REDMUTEX_URL, else redis://127.0.0.1:6379.
Each worker is a process of its own, as on three servers whose cron fires at the same minute.
The winner passes the lock's fence number with every write, so that the invoice store could
refuse a stale holder's writes; the others skip tonight's run.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import sys
import time

import redmutex

LOCK_NAME = "invoice:nightly:lock"
WORKERS = 3


def send_invoices(worker: int, lock: redmutex.Lock) -> int:
    sent = 0
    for customer in ("acme", "globex", "initech"):
        # Still ours? (local, no network). A lost lock raises LockLostError here, before the
        # write, and lock.fence raises too: a stale holder never writes.
        lock.check()
        print(f"worker {worker}: invoice for {customer}, fence {lock.fence}", flush=True)
        time.sleep(0.2)  # the slow part: rendering and mailing
        sent += 1
    return sent


def nightly_job(index: int, url: str, start: multiprocessing.synchronize.Barrier) -> bool:
    """One worker's run; True when it sent the invoices."""
    client = redmutex.Client(url)
    lock = client.lock(LOCK_NAME, ttl=30.0)
    start.wait(timeout=30)  # the three cron jobs fire at the same moment
    if not lock.acquire(blocking=False):
        holder = lock.status().holder  # who sends them, for the log (None if done already)
        who = holder.decode(errors="replace") if holder else "a worker that is done"
        print(f"worker {index}: {who} sends tonight's invoices; skipping", flush=True)
        return False
    try:
        # A real job would also record under the lock that tonight's run is done, so that a
        # worker starting after the release skips as well.
        sent = send_invoices(index, lock)
        print(f"worker {index}: sent {sent} invoices with fence {lock.fence}", flush=True)
        return True
    finally:
        lock.release()


def worker(index: int, url: str, start: multiprocessing.synchronize.Barrier) -> None:
    # The exit status tells the parent what happened: 0 sent, 10 skipped, 1 failed.
    sys.exit(0 if nightly_job(index, url, start) else 10)


def main() -> int:
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REDMUTEX_URL", "")
    url = url or "redis://127.0.0.1:6379"
    # spawn: each worker starts a fresh interpreter, like a process on another server.
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WORKERS)
    workers = [ctx.Process(target=worker, args=(i, url, start)) for i in range(WORKERS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        if w.is_alive():
            w.terminate()
            w.join()
    codes = [w.exitcode for w in workers]
    senders = codes.count(0)
    print(f"{senders} of {WORKERS} workers sent the invoices")
    return 0 if senders == 1 and codes.count(10) == WORKERS - 1 else 1


if __name__ == "__main__":
    sys.exit(main())
