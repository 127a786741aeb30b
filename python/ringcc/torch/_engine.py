"""_engine.py - the backend's worker threads, and the Work objects they
complete.

A `Worker` runs tasks in the order they were submitted, on its own thread,
as Gloo's ProcessGroup does: submitting returns at once with a
torch.futures.Future; the task's output tensors become the future's value
when it has run, or its exception (a RingccError carrying the library's
message, or the argument error) the future's exception. `work_for(future)`
wraps the future in a c10d Work (`_create_work_from_future`), so wait(),
is_completed() and get_future() behave as torch expects, and DDP's
communication hooks get a future completed with the output tensors.

Each worker thread is the only user of the communicators its tasks use (a
ringcc communicator is used by one thread at a time). The thread is a
daemon: a process that exits without destroying its process groups is not
held up by it.
"""

import collections
import threading

import torch
from torch._C._distributed_c10d import _create_work_from_future


class Worker:
    """A thread that runs submitted tasks in order."""

    def __init__(self, name):
        self._tasks = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name,
                                        daemon=True)
        self._thread.start()

    def submit(self, run, outputs):
        """Queues `run()`; returns a Future that completes with `outputs`
        (a list of tensors) once run() returned, or with its exception."""
        future = torch.futures.Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("ringcc: this process group was shut down")
            self._tasks.append((run, outputs, future))
            self._cond.notify()
        return future

    def _loop(self):
        while True:
            with self._cond:
                while not self._tasks and not self._closed:
                    self._cond.wait()
                if not self._tasks:
                    return
                run, outputs, future = self._tasks.popleft()
            try:
                run()
            except BaseException as e:  # noqa: B036 - handed to the waiter
                future.set_exception(e)
            else:
                future.set_result(outputs)

    def close(self, join=True):
        """Stops accepting tasks; the thread ends after the queued ones."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if join and self._thread is not threading.current_thread():
            self._thread.join()


def work_for(future):
    """A c10d Work whose wait()/is_completed()/get_future() follow `future`."""
    return _create_work_from_future(future)


def completed_work(outputs):
    """A Work that is already complete with `outputs`."""
    future = torch.futures.Future()
    future.set_result(outputs)
    return _create_work_from_future(future)


def failed_work(exc):
    """A Work that is already complete with exception `exc`."""
    future = torch.futures.Future()
    future.set_exception(exc)
    return _create_work_from_future(future)
