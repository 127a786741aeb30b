"""test_torch_cuda_dispatch.py - how the "ringcc" backend orders CUDA tensors'
collectives on torch's current stream (ProcessGroupRingcc._submit_cuda and
_call), with stand-ins for torch.cuda's stream, stream context and event.

What a CPU cannot run, and so is not here: the library's kernels on real
CUDA tensors (make gpu-check runs the device path; DDP on GPUs through
"ringcc" needs a GPU node). What is checked: the library call runs on the
group's worker thread, inside torch.cuda.stream(current stream), with that
stream's handle passed as the library's stream argument (the call is
stream-ordered, after whatever the caller queued); the caller returns once
the call is enqueued; the Work completes only when an event recorded on the
stream after the call has completed; host tensors keep stream NULL."""

import threading

import pytest

torch = pytest.importorskip("torch")
backend = pytest.importorskip("ringcc.torch._backend")


class FakeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


class Log:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def add(self, *what):
        with self.lock:
            self.events.append(what)


@pytest.fixture
def fake_cuda(monkeypatch):
    log = Log()
    current = FakeStream(0x5150)
    active = threading.local()
    released = threading.Event()

    class StreamContext:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            active.stream = self.stream
            log.add("enter", self.stream.cuda_stream)

        def __exit__(self, *exc):
            active.stream = None
            log.add("exit", self.stream.cuda_stream)

    class FakeEvent:
        def record(self, stream):
            log.add("record", stream.cuda_stream)

        def synchronize(self):
            # The stream has not run the call until the test says so.
            released.wait(10)
            log.add("synchronized")

    def current_stream(device=None):
        log.add("current_stream", str(device))
        return current

    monkeypatch.setattr(backend.torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(backend.torch.cuda, "stream", StreamContext)
    monkeypatch.setattr(backend.torch.cuda, "Event", FakeEvent)
    return log, active, released


class FakeArg:
    """An _Arg of a CUDA tensor, as far as _submit_cuda looks."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.tensor = type("T", (), {"device": "cuda:1" if cuda else "cpu"})()


class FakeComm:
    def __init__(self, log):
        self.log = log
        self.handle = object()

    def _run(self, fn, *args):
        self.log.add("library", fn, args[-1],
                     threading.current_thread().name)


def fake_group(log):
    """The attributes of a ProcessGroupRingcc that _submit_cuda and _call
    use, without a communicator."""
    group = type("G", (), {})()
    group._worker = backend.Worker("ringcc-test-worker")
    group._tls = threading.local()
    group._coalesced = None
    group._cuda_done = None
    group._comm = FakeComm(log)
    group.rank = lambda: 0
    group._work = lambda future, *rest: future
    group._call = lambda fn, *args: backend.ProcessGroupRingcc._call(
        group, fn, *args)
    return group


def test_cuda_tensors_run_on_the_current_stream(fake_cuda):
    log, active, released = fake_cuda
    group = fake_group(log)
    seen = {}

    def run():
        seen["stream"] = getattr(active, "stream", None)
        group._call("ringcc_allreduce", "send", "recv")

    future = backend.ProcessGroupRingcc._submit_cuda(
        group, run, ["out"], [FakeArg(False), FakeArg(True)])
    # Enqueued, not done: the stream has not run it.
    names = [e[0] for e in log.events]
    assert names == ["current_stream", "enter", "library", "exit", "record"], \
        log.events
    assert log.events[0][1] == "cuda:1", "the CUDA tensor's device"
    lib = log.events[2]
    assert lib[1] == "ringcc_allreduce"
    assert lib[2] == 0x5150, "the library got torch's current stream"
    assert lib[3] == "ringcc-test-worker", "called on the group's worker"
    assert seen["stream"].cuda_stream == 0x5150
    assert log.events[4] == ("record", 0x5150)
    assert not future.done(), "done before the stream ran the call"
    released.set()
    assert future.wait() == ["out"]
    assert log.events[-1] == ("synchronized",)
    # Afterwards the worker's thread has no stream: host calls get NULL.
    group._worker.submit(lambda: group._call("ringcc_barrier"), [])[0].wait()
    assert log.events[-1][1:3] == ("ringcc_barrier", None), log.events
    group._worker.close(join=True)
    group._cuda_done.close(join=True)


def test_a_failing_enqueue_raises_to_the_caller(fake_cuda):
    log, active, released = fake_cuda
    group = fake_group(log)

    def run():
        raise RuntimeError("ringcc_allreduce: RINGCC_ERR_INVALID_USAGE")

    with pytest.raises(RuntimeError, match="INVALID_USAGE"):
        backend.ProcessGroupRingcc._submit_cuda(group, run, [],
                                                [FakeArg(True)])
    assert ("exit", 0x5150) in log.events, "the stream context was left"
    assert getattr(group._tls, "stream", None) is None
    released.set()
    group._worker.close(join=True)
