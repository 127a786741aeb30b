"""_p2p.py - tagged point-to-point messages for the torch backend.

torch's send/recv carry a tag, complete asynchronously and may be posted in
any order (a rank may isend a large tensor to its neighbour and then irecv
from it, as every neighbour does at once), and a receive may name no source
(recv_anysource: the first message with its tag from any rank). libringcc's
send/recv are blocking, match in order per pair of ranks, and a
communicator is used by one thread at a time. What bridges the two:

- a channel per direction and peer: messages from rank a to rank b travel
  on a two-rank communicator of their own, made when the first one is
  sent (a puts a unique id in the process group's store, b reads it), used
  at a by a thread that only sends to b and at b by a thread that only
  receives from a. No send can then wait for anything but its receiver's
  posted receive, so every order of posting that completes with Gloo
  completes here;
- each message is a 16-byte header (tag, bytes) followed by the payload;
- one Inbox per process group holds the rank's posted receives, in the
  order posted. A channel's thread reads its peer's next message whenever
  a posted receive may take it (one from that peer, or from any source),
  and hands it to the earliest posted receive with its tag that takes its
  sender, or keeps it (an unexpected message) for a receive posted later.
  Messages with one tag from one sender match in the order sent; a receive
  from any source takes whichever message its channel read first (kept
  messages in the order they arrived), and the Work says who sent it. A
  receive from any source opens the channels of every peer: those whose
  sender has not sent yet wait for its id in the store.

A receive whose size differs from the message's fails with a message
naming both sizes (the payload is still read, so the channel stays in
step). A failure of the channel's communicator (timeout, a peer that died)
fails every receive from that peer posted on it and every later one, and
the receives from any source waiting at that moment.
"""

import collections
import datetime
import threading
import time

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

    def alive(self):
        """Whether its thread still runs (a queued send not yet taken)."""
        return self._worker.alive()


class _Posted:
    __slots__ = ("tensor", "tag", "src", "nbytes", "done", "source")

    def __init__(self, tensor, tag, src):
        self.tensor = tensor
        self.tag = tag
        self.src = src  # a rank, or None: any source
        self.nbytes = tensor.numel() * tensor.element_size()
        self.done = Completion()
        self.source = -1  # the sender's rank, once matched

    def takes(self, peer, tag):
        return self.tag == tag and (self.src is None or self.src == peer)


def _size_error(peer, tag, sent, posted):
    return RuntimeError(
        f"ringcc: recv from rank {peer} with tag {tag}: the message has "
        f"{sent} bytes but the receive tensor has {posted}")


class Inbox:
    """This rank's receives in one process group: each posted receive
    (from one rank, or from any) is matched to the messages the peers'
    RecvChannels read, in the order receives were posted; a message no
    posted receive takes is kept, in arrival order, for a later one.

    open_channel(peer) gives the RecvChannel of a peer (made at its first
    use); peers are the group's other ranks."""

    def __init__(self, open_channel, peers):
        self.lock = threading.Lock()
        self._open_channel = open_channel
        self._peers = peers
        self._posted = collections.deque()
        # tag -> deque of (peer, payload), in the order they arrived.
        self._unexpected = collections.defaultdict(collections.deque)
        self._failed = {}  # peer -> the exception that ended its channel

    def recv(self, tensor, tag, src):
        """A _Posted whose future completes with [tensor] once a message
        with `tag` from rank src (None: from any rank) has landed in it;
        its `source` is then the sender's rank."""
        req = _Posted(tensor, tag, src)
        channels = [self._open_channel(p)
                    for p in (self._peers if src is None else [src])]
        with self.lock:
            kept = self._take_kept(tag, src)
            if kept is None:
                error = self._failed.get(src) if src is not None else (
                    next(iter(self._failed.values()))
                    if len(self._failed) == len(self._peers) else None)
                if error is None:
                    self._posted.append(req)
                    for ch in channels:
                        ch.cond.notify()
                    return req
        if kept is None:
            req.done.set_exception(error)
        else:
            _deliver_copy(req, *kept)
        return req

    def _take_kept(self, tag, src):
        kept = self._unexpected.get(tag)
        for i, (peer, payload) in enumerate(kept or ()):
            if src is None or peer == src:
                del kept[i]
                return peer, payload
        return None

    # The channels' side (called with self.lock held where named _locked).

    def wanted_locked(self, peer, any_source=True):
        """Whether a posted receive may take peer's next message (with
        any_source False: a receive from peer itself)."""
        return any(r.src == peer or (any_source and r.src is None)
                   for r in self._posted)

    def match_locked(self, peer, tag):
        for i, req in enumerate(self._posted):
            if req.takes(peer, tag):
                del self._posted[i]
                return req
        return None

    def keep_locked(self, peer, tag, payload):
        self._unexpected[tag].append((peer, payload))

    def fail(self, peer, error):
        """peer's channel failed: its posted receives, the receives from
        any source waiting now (one of its messages may be lost with it)
        and every later receive from it fail with `error`."""
        with self.lock:
            self._failed[peer] = error
            failed = [r for r in self._posted if r.src in (None, peer)]
            self._posted = collections.deque(
                r for r in self._posted if r.src not in (None, peer))
        for req in failed:
            req.done.set_exception(error)


def _deliver_copy(req, peer, payload):
    if payload.numel() != req.nbytes:
        req.done.set_exception(_size_error(peer, req.tag, payload.numel(),
                                           req.nbytes))
        return
    if req.nbytes:
        req.tensor.view(-1).view(torch.uint8).copy_(payload)
    req.source = peer
    req.done.set_result([req.tensor])


def _opened(store, key, timeout_ms, wanted):
    """Whether `key` (the sender's unique id) is in the store, waiting for
    it while a receive may take the sender's message: wanted() is "own"
    (a receive from this peer waits: store.wait blocks, with the group's
    timeout, as any receive), "any" (only receives from any source wait:
    the store is asked again, more rarely the longer it takes, since a
    peer that never sends must fail nothing) or None (no receive waits,
    or the channel was closed: False)."""
    pause = 0.001
    while not store.check([key]):
        why = wanted()
        if why is None:
            return False
        if why == "own":
            store.wait([key], datetime.timedelta(milliseconds=timeout_ms))
            return True
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return True


class RecvChannel:
    """Messages from `peer` to this rank, read on one thread whenever the
    inbox has a receive they may match (from this peer, or from any)."""

    def __init__(self, inbox, store, key, peer, timeout_ms):
        self._inbox = inbox
        self._store, self._key, self._timeout_ms = store, key, timeout_ms
        self._peer = peer
        self._comm = None
        self.cond = threading.Condition(inbox.lock)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"ringcc-recv-{peer}")
        track(self._thread, self.close)
        self._thread.start()

    def _wanted(self):
        """What waits for this peer's next message (see _opened)."""
        with self.cond:
            if self._closed:
                return None
            if self._inbox.wanted_locked(self._peer, any_source=False):
                return "own"
            return "any" if self._inbox.wanted_locked(self._peer) else None

    def _loop(self):
        header = torch.empty(_HEADER_ELEMS, dtype=torch.int64)
        while True:
            with self.cond:
                while not self._closed and \
                        not self._inbox.wanted_locked(self._peer):
                    self.cond.wait()
                if self._closed:
                    return
            try:
                if self._comm is None:
                    if not _opened(self._store, self._key, self._timeout_ms,
                                   self._wanted):
                        continue  # closed, or no receive waits any more
                    self._comm = _pair_comm(self._store, self._key, 1,
                                            self._timeout_ms, make_id=False)
                self._receive_one(header)
            except BaseException as e:  # noqa: B036 - every waiter gets it
                if not isinstance(e, Exception):
                    e = RuntimeError(f"ringcc: operation interrupted: {e!r}")
                self._inbox.fail(self._peer, e)
                return

    def _receive_one(self, header):
        h, peer = self._comm.handle, self._peer
        self._comm._run("ringcc_recv", header.data_ptr(), _HEADER_ELEMS,
                        Datatype.INT64, 0, h, None)
        tag, nbytes = int(header[0]), int(header[1])
        with self.cond:
            req = self._inbox.match_locked(peer, tag)
        if req is not None and req.nbytes == nbytes:
            if nbytes:
                self._comm._run("ringcc_recv", req.tensor.data_ptr(), nbytes,
                                Datatype.UINT8, 0, h, None)
            req.source = peer
            req.done.set_result([req.tensor])
            return
        payload = torch.empty(nbytes, dtype=torch.uint8)
        if nbytes:
            self._comm._run("ringcc_recv", payload.data_ptr(), nbytes,
                            Datatype.UINT8, 0, h, None)
        if req is not None:  # the tag matched, the size did not
            req.done.set_exception(_size_error(peer, tag, nbytes,
                                               req.nbytes))
            return
        with self.cond:  # a receive may have been posted meanwhile
            req = self._inbox.match_locked(peer, tag)
            if req is None:
                self._inbox.keep_locked(peer, tag, payload)
                return
        _deliver_copy(req, peer, payload)

    def close(self):
        with self.cond:
            self._closed = True
            self.cond.notify()

    def join(self, timeout):
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def alive(self):
        """Whether its thread still runs (inside a receive)."""
        return self._thread.is_alive()
