"""_requests.py - groups and requests (ringcc_group_start/end,
ringcc_group_end_async, ringcc_test, ringcc_wait) for the binding.

    with ringcc.group():                  # sends and receives posted together
        comm.send(a, peer=1)
        comm.recv(b, peer=1)

    req = comm.allreduce(x, async_op=True)   # a one-call group, non-blocking
    ...                                      # compute; x is not touched
    req.wait()                               # returns x (raises on failure)

    with ringcc.group(async_op=True) as g:   # a whole group, non-blocking
        ...
    g.request.wait()

A group is per thread and nests; its calls are checked when made (a bad
argument raises there and the group goes on) and run at the outermost end.
Inside a group, send and recv may name this rank itself. The buffers of a
group or a request must stay alive and untouched until its end or until
wait()/test() says it is done: a Request keeps the Python objects it was
given until then.
"""

import ctypes
import functools
import threading

from ._lib import lib

_tls = threading.local()


def in_group():
    """True while this thread is inside `with ringcc.group()`."""
    return getattr(_tls, "depth", 0) > 0


def _check(rc, call, handle=None):
    from .comm import _check as check  # comm imports this module
    check(rc, call, handle)


class Request:
    """A group's work in flight (ringcc_request_t). wait() blocks until it
    is done and returns `result` (or raises RingccError); test() never
    blocks: True when done (raising if it failed). A request that is
    dropped unfinished is waited for first (its buffers are in use)."""

    __slots__ = ("_req", "_keep", "_handle", "_error", "result")

    def __init__(self, req, result=None, keep=(), handle=None):
        self._req = req  # ctypes.c_void_p; None once complete
        self._keep = keep
        self._handle = handle
        self._error = None
        self.result = result

    def _finish(self, rc, call):
        self._req = None
        self._keep = ()
        try:
            _check(rc, call, self._handle)
        except Exception as e:
            self._error = e
            raise

    def wait(self):
        if self._req is not None:
            self._finish(lib.ringcc_wait(self._req), "ringcc_wait")
        elif self._error is not None:
            raise self._error
        return self.result

    def test(self):
        if self._req is None:
            if self._error is not None:
                raise self._error
            return True
        done = ctypes.c_int(0)
        rc = lib.ringcc_test(self._req, ctypes.byref(done))
        if done.value:
            self._finish(rc, "ringcc_test")
            return True
        _check(rc, "ringcc_test", self._handle)
        return False

    def is_completed(self):
        return self.test()

    def __del__(self):
        if getattr(self, "_req", None) is not None:
            lib.ringcc_wait(self._req)
            self._req = None


class group:
    """`with ringcc.group():` - the calls inside run together at the end
    (ringcc_group_end). With async_op=True the end returns at once and
    `.request` is its Request."""

    def __init__(self, async_op=False):
        self.async_op = async_op
        self.request = None
        self._keep = []

    def keep(self, *objects):
        """Objects the group's buffers live in, kept until it is done."""
        self._keep.extend(objects)

    def __enter__(self):
        _check(lib.ringcc_group_start(), "ringcc_group_start")
        _tls.depth = getattr(_tls, "depth", 0) + 1
        stack = getattr(_tls, "groups", None)
        if stack is None:
            stack = _tls.groups = []
        stack.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _tls.groups.pop()
        _tls.depth -= 1
        outer = _tls.depth == 0
        if not outer:  # the outermost end runs it; it keeps our objects
            _tls.groups[-1].keep(*self._keep)
        if not (self.async_op and outer):
            rc = lib.ringcc_group_end()
            if exc_type is None:
                _check(rc, "ringcc_group_end")
            return False
        req = ctypes.c_void_p()
        rc = lib.ringcc_group_end_async(ctypes.byref(req))
        if exc_type is None:
            _check(rc, "ringcc_group_end_async")
        self.request = Request(req if rc == 0 else None, None,
                               tuple(self._keep))
        return False


def keep_in_group(*objects):
    """Inside a group: keep objects alive until the group is done."""
    stack = getattr(_tls, "groups", None)
    if stack:
        stack[-1].keep(*objects)


def async_capable(method):
    """Gives a Comm method `async_op=`: True runs it as a one-call group
    ended with ringcc_group_end_async and returns a Request whose wait()
    returns what the method returns."""
    @functools.wraps(method)
    def call(self, *args, async_op=False, **kwargs):
        if not async_op:
            result = method(self, *args, **kwargs)
            keep_in_group(args, kwargs, result)
            return result
        g = group(async_op=True)
        with g:
            result = method(self, *args, **kwargs)
        g.request.result = result
        g.request._keep = (args, kwargs, result)
        g.request._handle = self._live()
        return g.request
    return call
