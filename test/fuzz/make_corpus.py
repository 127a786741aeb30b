#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets: test/fuzz/corpus/<target>/.

A handful of valid inputs and near misses (one field wrong) per target, in
the layouts of lib/boot/bootstrap.c, transports/net_socket.c and transports/net.c.
Run from anywhere; it rewrites the corpus directories it knows.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = bytes(range(0xA0, 0xB0))
NET_SECRET = bytes([0x5E, 0xC2, 0xE7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])


def be16(v): return struct.pack(">H", v)
def be32(v): return struct.pack(">I", v)
def be64(v): return struct.pack(">Q", v)


def addr4(ip, port):
    return be16(4) + be16(port) + be32(0) + bytes(ip) + bytes(12)


def addr6(ip16, port, scope=0):
    return be16(6) + be16(port) + be32(scope) + bytes(ip16)


LOOP6 = bytes(15) + b"\x01"
LINK6 = b"\xfe\x80" + bytes(13) + b"\x01"


def fnv1a(b):
    h = 2166136261
    for x in b:
        h = ((h ^ x) * 16777619) & 0xFFFFFFFF
    return h


def unique_id(addr, magic=0x52434349, version=1, fix_sum=True):
    body = be32(magic) + be16(version) + be16(0) + addr + SECRET
    body += bytes(124 - len(body))
    return body + be32(fnv1a(body) if fix_sum else 0xDEADBEEF)


def rdv_hello(rank, nranks, addr, magic=0x52434348):
    return be32(magic) + be32(rank) + be32(nranks) + addr


def opening(purpose=1, version=2, magic=0x52434341):
    return be32(magic) + be16(version) + be16(purpose) + bytes(range(16))


def challenge(purpose=1, magic=0x52434342):
    return be32(magic) + be16(purpose) + be16(0) + bytes(range(16, 32)) + bytes(32)


def reply(status, nranks, magic=0x52434354):
    return be32(magic) + be32(status) + be32(nranks) + bytes(range(48, 64))


def preamble(index, nsocks, conn_id, magic=0x52434E53):
    return be32(magic) + be16(index) + be16(nsocks) + be64(conn_id)


def net_hello(rank, kind, nranks, magic=0x52434E48):
    h = struct.pack("<Iiii", magic, rank, kind, nranks)
    return h + bytes(64 - len(h))


MAC = bytes(range(0x80, 0xA0))  # a proof's place (compared, not parsed)


LO = [127, 0, 0, 1]
CORPUS = {
    "id": {
        "v4": b"\x00" + unique_id(addr4(LO, 29500)),
        "v6": b"\x02" + unique_id(addr6(LOOP6, 29500)),
        "v6_scope": b"\x04" + unique_id(addr6(LINK6, 41000, scope=2)),
        "bad_sum": b"\x00" + unique_id(addr4(LO, 29500), fix_sum=False),
        "bad_sum_fixup": b"\x01" + unique_id(addr4(LO, 29500), fix_sum=False),
        "bad_magic": b"\x00" + unique_id(addr4(LO, 1), magic=0x52434358),
        "bad_version": b"\x00" + unique_id(addr4(LO, 1), version=2),
        "port0": b"\x00" + unique_id(addr4(LO, 0)),
        "family5": b"\x01" + unique_id(be16(5) + bytes(22) + b"\x01"),
        "truncated": b"\x00" + unique_id(addr4(LO, 29500))[:100],
    },
    "rdv_hello": {
        "one_rank": b"\x00" + opening() + rdv_hello(0, 1, bytes(24)),
        "four_ranks": b"\x00" + opening() +
                      b"".join(rdv_hello(r, 4, addr4([10, 0, 0, r + 1], 40000 + r))
                               for r in (2, 0, 3, 1)),
        "v6": b"\x00" + opening() + rdv_hello(1, 2, addr6(LOOP6, 5000)) +
              rdv_hello(0, 2, addr6(LINK6, 5001, 3)),
        "mismatch": b"\x00" + opening() + rdv_hello(0, 4, addr4(LO, 1)) +
                    rdv_hello(1, 8, addr4(LO, 2)),
        "duplicate": b"\x00" + opening() + rdv_hello(1, 2, addr4(LO, 1)) +
                     rdv_hello(1, 2, addr4(LO, 2)),
        "bad_rank": b"\x00" + opening() + rdv_hello(4, 4, addr4(LO, 1)),
        "bad_nranks": b"\x00" + opening() + rdv_hello(0, (1 << 20) + 1, addr4(LO, 1)),
        "bad_addr": b"\x00" + opening() + rdv_hello(0, 2, be16(4) + bytes(22)),
        "bad_magic": b"\x00" + opening() + rdv_hello(0, 2, addr4(LO, 1), magic=0x52434352),
        "short": b"\x00" + opening() + rdv_hello(0, 2, addr4(LO, 1))[:20],
        "ring_opening": b"\x01" + opening(purpose=2) + rdv_hello(0, 1, bytes(24)),
        "wrong_purpose": b"\x00" + opening(purpose=2),
        "old_version": b"\x00" + opening(version=1),
        "short_opening": b"\x00" + opening()[:10],
    },
    "rdv_table": {
        "four": bytes([3, 2]) + challenge() + reply(0, 4) +
                b"".join(addr4([10, 0, 0, r], 40000 + r) for r in range(4)),
        "one": bytes([0, 0]) + challenge() + reply(0, 1) + bytes(24),
        "two_v6": bytes([1, 1]) + challenge() + reply(0, 2) + addr6(LOOP6, 1) +
                  addr6(LINK6, 2, 7),
        "refused": bytes([3, 0]) + challenge() + reply(4, 4),
        "other_nranks": bytes([3, 0]) + challenge() + reply(0, 5) + bytes(120),
        "bad_magic": bytes([1, 0]) + challenge() + reply(0, 2, magic=0x52434348),
        "bad_entry": bytes([1, 0]) + challenge() + reply(0, 2) + addr4(LO, 1) +
                     addr4(LO, 0),
        "short_table": bytes([3, 2]) + challenge() + reply(0, 4) + addr4(LO, 1) * 3,
        "bad_challenge": bytes([1, 0]) + challenge(magic=0x52434341) + reply(0, 2),
        "ring_challenge": bytes([1, 0]) + challenge(purpose=2) + reply(0, 2),
    },
    "ring_hello": {
        "ok": be32(6) + be32(2) + be32(0x52434352) + be32(2) + be32(8),
        "wrong_rank": be32(6) + be32(2) + be32(0x52434352) + be32(3) + be32(8),
        "wrong_nranks": be32(6) + be32(2) + be32(0x52434352) + be32(2) + be32(9),
        "hello_magic": be32(6) + be32(2) + be32(0x52434348) + be32(2) + be32(8),
        "short": be32(6) + be32(2) + be32(0x52434352) + be32(2),
    },
    "allgather_header": {
        "ok": be32(3) + be64(64) + be32(0x52434344) + be32(3) + be64(64),
        "barrier": be32(9) + be64(1) + be32(0x52434344) + be32(9) + be64(1),
        "other_call": be32(3) + be64(64) + be32(0x52434344) + be32(4) + be64(64),
        "other_bytes": be32(3) + be64(64) + be32(0x52434344) + be32(3) + be64(1 << 40),
        "short": be32(3) + be64(64) + be32(0x52434344) + be32(3),
    },
    "net_preamble": {
        "two_socks": preamble(0, 2, 0x1122334455667788) + net_hello(0, 0, 4) +
                     preamble(1, 2, 0x1122334455667788),
        "one_sock_p2p": preamble(0, 1, 42) + net_hello(3, 1, 4),
        "sixteen": b"".join(preamble(i, 16, 7) for i in range(15, 0, -1)) +
                   preamble(0, 16, 7) + net_hello(2, 0, 4),
        "bad_magic": preamble(0, 2, 1, magic=0x52434E4C),
        "zero_socks": preamble(0, 0, 1),
        "index_too_big": preamble(2, 2, 1),
        "too_many": preamble(0, 17, 1),
        "self": preamble(0, 1, 5) + net_hello(1, 0, 4),
        "device_kind": preamble(0, 1, 9) + net_hello(0, 2, 4),
        "short": preamble(0, 2, 1)[:9],
    },
    "net_header": {
        "two_msgs": be32(65536) + be32(5) + be32(0x01000007) + b"hello" +
                    be32(0) + be32(0x02000000),
        "full_slot": be32(1024) + be32(1024) + be32(9) + bytes(1024),
        "too_big": be32(1024) + be32(1025) + be32(9) + bytes(64),
        "short": be32(1024) + be32(4)[:3],
    },
    "net_hello": {
        "ok": NET_SECRET + be16(3) + be16(1) + net_hello(0, 0, 4),
        "ok_p2p": NET_SECRET + be16(7) + be16(0) + net_hello(7, 1, 8),
        "self": NET_SECRET + be16(3) + be16(1) + net_hello(1, 0, 4),
        "device_kind": NET_SECRET + be16(3) + be16(1) + net_hello(2, 3, 4),
        "bad_kind": NET_SECRET + be16(3) + be16(1) + net_hello(2, 4, 4),
        "bad_nranks": NET_SECRET + be16(3) + be16(1) + net_hello(2, 0, 5),
        "bad_magic": NET_SECRET + be16(3) + be16(1) +
                     net_hello(2, 0, 4, magic=0x48434E52),
        "short": NET_SECRET + be16(3) + be16(1) + net_hello(2, 0, 4)[:10],
    },
}

if __name__ == "__main__":
    for target, seeds in CORPUS.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        # The named seeds are rewritten; inputs a fuzzer found (named by
        # their hash) stay.
        for old in os.listdir(d):
            if len(old) != 40 and old not in seeds:
                os.remove(os.path.join(d, old))
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    print("wrote", sum(len(s) for s in CORPUS.values()), "seeds for",
          len(CORPUS), "targets")
