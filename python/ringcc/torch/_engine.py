"""_engine.py - the backend's worker threads, and the Work objects they
complete.

A `Worker` runs tasks in the order they were submitted, on its own thread,
as Gloo's ProcessGroup does: submitting returns at once with a
torch.futures.Future (its Work's `task` names the task); the task's output tensors become the future's value
when it has run, or its exception (a RingccError carrying the library's
message, or the argument error) the future's exception. `work_for(future)`
wraps the future in a c10d Work (`_create_work_from_future`), so wait(),
is_completed() and get_future() behave as torch expects, and DDP's
communication hooks get a future completed with the output tensors.

One task runs at a time, so the communicators a worker's tasks use are used
by one thread at a time, as libringcc requires. That thread is the worker's,
except in one case: a Work's wait() that finds its task at the head of the
queue with the worker idle takes the task and runs it in the waiting thread
(`run_inline`). A synchronous call (dist.all_reduce without async_op) then
costs no hand-over to the worker and back, which is most of the Python
layer's time for small messages; the order of tasks is the same. The thread is a
daemon: a process that exits without destroying its process groups is not
held up by it.
"""

import atexit
import collections
import threading
import weakref

import torch
from torch._C._distributed_c10d import Work


def _value(source):
    return source.value()  # raises the source's exception


class Completion:
    """A future for torch, and the means to complete it.

    torch.futures.Future.set_exception() completes a future *successfully*
    with the exception object as its value (Python unwraps it on wait());
    C++ consumers such as DDP's reducer then read that object as the output
    tensors and crash. So the future handed out is a then() of a private
    source: an exception set on the source makes the callback raise, and
    torch marks the handed-out future as failed in C++ (setError), which
    every consumer, Python or C++, sees as an error with the message."""

    __slots__ = ("_source", "future")

    def __init__(self):
        self._source = torch.futures.Future()
        self.future = self._source.then(_value)

    def set_result(self, outputs):
        self._source.set_result(outputs)

    def set_exception(self, exc):
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit
            exc = RuntimeError(f"ringcc: operation interrupted: {exc!r}")
        self._source.set_exception(exc)


# Threads of this module that may still run when the interpreter exits. A
# daemon thread that drops its last reference to a tensor while Python
# finalizes is stopped in the middle of torch's C++ code (std::terminate),
# so at exit every such thread is told to stop and joined first.
_THREADS = weakref.WeakSet()


def track(thread, stop):
    """Registers a thread and the function that makes it return."""
    thread._ringcc_stop = stop
    _THREADS.add(thread)


@atexit.register
def _stop_threads():
    threads = list(_THREADS)
    for t in threads:
        t._ringcc_stop()
    for t in threads:
        if t is not threading.current_thread():
            t.join(timeout=2.0)


class Worker:
    """A thread that runs submitted tasks in order."""

    def __init__(self, name):
        self._tasks = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._busy = False  # a task is running (here or inline)
        self._thread = threading.Thread(target=self._loop, name=name,
                                        daemon=True)
        track(self._thread, lambda: self.close(join=False))
        self._thread.start()

    def submit(self, run, outputs):
        """Queues `run()`; returns a Future that completes with `outputs`
        (a list of tensors) once run() returned, or with its exception."""
        task = (run, outputs, Completion())
        with self._cond:
            if self._closed:
                raise RuntimeError("ringcc: this process group was shut down")
            self._tasks.append(task)
            self._cond.notify()
        return task[2].future, task

    @staticmethod
    def _execute(task):
        run, outputs, done = task
        try:
            run()
        except BaseException as e:  # noqa: B036 - handed to the waiter
            done.set_exception(e)
        else:
            done.set_result(outputs)

    def _finished(self):
        with self._cond:
            self._busy = False
            if self._tasks or self._closed:  # else the worker sleeps on
                self._cond.notify_all()

    def _loop(self):
        while True:
            with self._cond:
                while (self._busy or not self._tasks) and not self._closed:
                    self._cond.wait()
                if self._closed and not self._tasks:
                    return
                if self._busy:
                    continue  # closed while an inline task runs
                task = self._tasks.popleft()
                self._busy = True
            self._execute(task)
            del task  # hold no tensor while waiting for the next
            self._finished()

    def run_inline(self, task):
        """Runs `task` in the calling thread if it is next and nothing runs;
        returns whether it did."""
        with self._cond:
            if self._busy or not self._tasks or self._tasks[0] is not task:
                return False
            self._tasks.popleft()
            self._busy = True
        self._execute(task)
        self._finished()
        return True

    def run_now(self, run, outputs):
        """Runs `run()` in the calling thread at once if no task is queued
        or running (a blocking call, which its caller waits for anyway);
        returns its completed Future (as submit's), or None where it must
        queue behind others."""
        with self._cond:
            if self._busy or self._tasks or self._closed:
                return None
            self._busy = True
        task = (run, outputs, Completion())
        self._execute(task)
        self._finished()
        return task[2].future

    def close(self, join=True, timeout=None):
        """Stops accepting tasks; the thread ends after the queued ones."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if join and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def join(self, timeout=None):
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def alive(self):
        return self._thread.is_alive()


class RingccWork(Work):
    """A c10d Work over a Completion's future: wait() blocks (without the
    GIL) until the operation ran and raises its error, is_completed() says
    whether it ran, get_future() is the future itself. (torch's
    _create_work_from_future makes a Work whose wait() returns normally
    after a failure, so errors would only reach those who read the
    future.)"""

    def __init__(self, future, worker=None, task=None, source=None):
        super().__init__()
        self._future = future
        self._worker, self._task = worker, task
        self._source = source

    def source_rank(self):
        """A receive's sender (c10d's Work::sourceRank, which torch's
        dist.recv(src=None) reads as _source_rank()), once it completed."""
        if self._source is None:
            raise RuntimeError("ringcc: source_rank() may only be called on "
                               "the Work of a recv")
        if not self._future.done():
            raise RuntimeError("ringcc: source_rank() of a recv that has not "
                               "completed (wait() first)")
        return self._source()

    _source_rank = source_rank

    def wait(self, timeout=None):
        if self._task is not None and not self._future.done():
            self._worker.run_inline(self._task)
        self._task = None
        self._future.wait()  # raises the operation's error
        return True

    def is_completed(self):
        return self._future.done()

    def is_success(self):
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 - a failed operation
            return False
        return True

    def exception(self):
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as e:  # noqa: BLE001
            return e
        return None

    def result(self):
        return self._future.wait()

    def get_future(self):
        return self._future

    def synchronize(self):
        self._future.wait()


def work_for(future, worker=None, task=None, source=None):
    """A Work whose wait()/is_completed()/get_future() follow `future`;
    with the worker and task that complete it, wait() may run the task;
    source() gives a receive's sender (Work.source_rank())."""
    return RingccWork(future, worker, task, source)


def completed_work(outputs):
    """A Work that is already complete with `outputs`."""
    done = Completion()
    done.set_result(outputs)
    return RingccWork(done.future)
