"""requests_vs_thread.py - four AllReduces in flight, then waited: through a
Python worker thread making blocking calls (as the torch backend does)
against async_op=True requests (the communicator's progress thread), in
alternation, medians of the slowest rank (a benchmark, not a test).

    build/bin/ringcc-run -np 2 python3 python/benchmarks/requests_vs_thread.py [BYTES]
"""
import queue
import statistics
import sys
import threading
import time

import numpy as np
import ringcc
size = int(sys.argv[1]) if len(sys.argv) > 1 else (4 << 20)
with ringcc.Comm.from_env(timeout=120) as comm:
    xs = [np.ones(size // 4, np.float32) for _ in range(4)]
    q = queue.Queue()
    def worker():
        while True:
            item = q.get()
            if item is None:
                return
            x, ev = item
            comm.allreduce(x)
            ev.set()
    th = threading.Thread(target=worker, daemon=True); th.start()
    def via_thread():
        evs = []
        for x in xs:
            ev = threading.Event(); q.put((x, ev)); evs.append(ev)
        for ev in evs: ev.wait()
    def via_requests():
        for r in [comm.allreduce(x, async_op=True) for x in xs]:
            r.wait()
    res = {"thread": [], "requests": []}
    for i in range(9):
        for name, fn in (("thread", via_thread), ("requests", via_requests)) if i % 2 else (("requests", via_requests), ("thread", via_thread)):
            comm.barrier(); t0 = time.perf_counter(); fn()
            t = np.array([time.perf_counter() - t0]); comm.allreduce(t, op="max")
            res[name].append(t[0] * 1e3)
    q.put(None); th.join()
    comm.barrier()
    if comm.rank == 0:
        print(f"n={comm.size} 4 x {size >> 10} KiB: python worker thread {statistics.median(res['thread']):.2f} ms, requests {statistics.median(res['requests']):.2f} ms")
