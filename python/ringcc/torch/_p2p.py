"""_p2p.py - tagged point-to-point messages for the torch backend.

torch's send/recv carry a tag, complete asynchronously and may be posted in
any order (a rank may isend a large tensor to its neighbour and then irecv
from it, as every neighbour does at once). libringcc's send/recv are
blocking, match in order per pair of ranks, and a communicator is used by
one thread at a time. What bridges the two:

- a channel per direction and peer: messages from rank a to rank b travel
  on a two-rank communicator of their own, made when the first one is
  sent (a puts a unique id in the process group's store, b reads it), used
  at a by a thread that only sends to b and at b by a thread that only
  receives from a. No send can then wait for anything but its receiver's
  posted receive, so every order of posting that completes with Gloo
  completes here;
- each message is a 16-byte header (tag, bytes) followed by the payload.
  The receiving thread reads the header, hands the payload to the earliest
  posted receive with that tag, or keeps it (an unexpected message) for a
  receive posted later. Messages with one tag match in the order sent.

A receive whose size differs from the message's fails with a message
naming both sizes (the payload is still read, so the channel stays in
step). A failure of the channel's communicator (timeout, a peer that died)
fails every receive posted on it and every later one.
"""

import collections
import threading

import torch

import ringcc
from ringcc._lib import Datatype

from ._engine import Completion, Worker, track

_HEADER_ELEMS = 2  # int64: tag, payload bytes


def _pair_comm(store, key, nranks_rank, timeout_ms, make_id):
    """The two-rank communicator of one channel: the sender (rank 0 in it)
    publishes a unique id under `key`, the receiver reads it."""
    rank = nranks_rank
    if make_id:
        uid = ringcc.get_unique_id()
        store.set(key, bytes(uid))
    else:
        uid = ringcc.UniqueId(store.get(key))
    return ringcc.Comm(2, uid, rank, timeout_ms=timeout_ms)


class SendChannel:
    """Messages from this rank to `peer`, sent in order on one thread."""

    def __init__(self, store, key, peer, timeout_ms):
        self._store, self._key, self._timeout_ms = store, key, timeout_ms
        self._comm = None
        self._worker = Worker(f"ringcc-send-{peer}")

    def send(self, tensor, tag):
        """Queues the message; the Future completes when it is sent."""
        def run():
            if self._comm is None:
                self._comm = _pair_comm(self._store, self._key, 0,
                                        self._timeout_ms, make_id=True)
            nbytes = tensor.numel() * tensor.element_size()
            header = torch.tensor([tag, nbytes], dtype=torch.int64)
            h = self._comm.handle
            self._comm._run("ringcc_send", header.data_ptr(), _HEADER_ELEMS,
                            Datatype.INT64, 1, h, None)
            if nbytes:
                self._comm._run("ringcc_send", tensor.data_ptr(), nbytes,
                                Datatype.UINT8, 1, h, None)
        return self._worker.submit(run, [tensor])[0]

    def close(self):
        self._worker.close(join=False)

    def join(self, timeout):
        self._worker.join(timeout)


class _Posted:
    __slots__ = ("tensor", "tag", "nbytes", "done")

    def __init__(self, tensor, tag):
        self.tensor = tensor
        self.tag = tag
        self.nbytes = tensor.numel() * tensor.element_size()
        self.done = Completion()


def _size_error(peer, tag, sent, posted):
    return RuntimeError(
        f"ringcc: recv from rank {peer} with tag {tag}: the message has "
        f"{sent} bytes but the receive tensor has {posted}")


class RecvChannel:
    """Messages from `peer` to this rank, matched to posted receives by
    tag on one thread."""

    def __init__(self, store, key, peer, timeout_ms):
        self._store, self._key, self._timeout_ms = store, key, timeout_ms
        self._peer = peer
        self._comm = None
        self._lock = threading.Condition(threading.Lock())
        self._posted = collections.deque()
        self._unexpected = collections.defaultdict(collections.deque)
        self._error = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"ringcc-recv-{peer}")
        track(self._thread, self.close)
        self._thread.start()

    def recv(self, tensor, tag):
        """A Future that completes with [tensor] once a message with `tag`
        from the peer has landed in it."""
        req = _Posted(tensor, tag)
        with self._lock:
            if self._error is not None:
                req.done.set_exception(self._error)
                return req.done.future
            kept = self._unexpected.get(tag)
            if kept:
                payload = kept.popleft()
                self._deliver_copy(req, payload)
                return req.done.future
            self._posted.append(req)
            self._lock.notify()
        return req.done.future

    def _deliver_copy(self, req, payload):
        if payload.numel() != req.nbytes:
            req.done.set_exception(_size_error(self._peer, req.tag,
                                                 payload.numel(), req.nbytes))
            return
        if req.nbytes:
            req.tensor.view(-1).view(torch.uint8).copy_(payload)
        req.done.set_result([req.tensor])

    def _match(self, tag):
        for i, req in enumerate(self._posted):
            if req.tag == tag:
                del self._posted[i]
                return req
        return None

    def _loop(self):
        header = torch.empty(_HEADER_ELEMS, dtype=torch.int64)
        while True:
            with self._lock:
                while not self._posted and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
            try:
                self._receive_one(header)
            except BaseException as e:  # noqa: B036 - every waiter gets it
                with self._lock:
                    self._error = e
                    failed, self._posted = list(self._posted), \
                        collections.deque()
                for req in failed:
                    req.done.set_exception(e)
                return

    def _receive_one(self, header):
        if self._comm is None:
            self._comm = _pair_comm(self._store, self._key, 1,
                                    self._timeout_ms, make_id=False)
        h = self._comm.handle
        self._comm._run("ringcc_recv", header.data_ptr(), _HEADER_ELEMS,
                        Datatype.INT64, 0, h, None)
        tag, nbytes = int(header[0]), int(header[1])
        with self._lock:
            req = self._match(tag)
        if req is not None and req.nbytes == nbytes:
            if nbytes:
                self._comm._run("ringcc_recv", req.tensor.data_ptr(), nbytes,
                                Datatype.UINT8, 0, h, None)
            req.done.set_result([req.tensor])
            return
        payload = torch.empty(nbytes, dtype=torch.uint8)
        if nbytes:
            self._comm._run("ringcc_recv", payload.data_ptr(), nbytes,
                            Datatype.UINT8, 0, h, None)
        if req is not None:  # the tag matched, the size did not
            req.done.set_exception(_size_error(self._peer, tag, nbytes,
                                                 req.nbytes))
            return
        with self._lock:  # a receive may have been posted meanwhile
            req = self._match(tag)
            if req is None:
                self._unexpected[tag].append(payload)
                return
        self._deliver_copy(req, payload)

    def close(self):
        with self._lock:
            self._closed = True
            self._lock.notify()

    def join(self, timeout):
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
