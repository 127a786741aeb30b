"""test_torch_backend.py - the torch.distributed backend "ringcc", each rank
its own process: every operation against gloo in the same job (integer data,
bitwise), point to point with tags, subgroups, asynchrony, argument errors
(ranks/torch_ranks.py), and a rank that dies or stops mid-training
(ranks/kill_ranks.py)."""

import re

import pytest

from launcher import run_ranks

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ops_against_gloo(n):
    job = run_ranks(n, "torch_ranks.py", "ops", timeout=400)
    assert int(job.lines(0, "CHECKED")[0]) > 200


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("what", ["p2p", "anysource", "subgroups", "async",
                                  "errors"])
def test_backend(what, n):
    job = run_ranks(n, "torch_ranks.py", what, timeout=240)
    assert int(job.lines(0, "CHECKED")[0]) > 0


def test_p2p_over_tcp_leaves_quietly():
    """send/recv and isend/irecv over TCP (each pair's channel a
    communicator of its own), then destroy_process_group: the channels say
    goodbye, so no rank logs a warning about a peer that left (they were
    aborted at shutdown, which a peer rightly takes for a failure)."""
    job = run_ranks(3, "torch_ranks.py", "p2p", timeout=240,
                    env={"RINGCC_SHM_DISABLE": "1",
                         "RINGCC_SOCKET_IFNAME": "=lo"})
    assert int(job.lines(0, "CHECKED")[0]) > 0
    for rank, out in enumerate(job.outputs):
        assert "RINGCC WARN" not in out, f"rank {rank}:\n{out}"


@pytest.mark.parametrize("mode,timeout", [("kill", 30), ("stop", 6)])
def test_rank_lost_mid_training(mode, timeout):
    n = 3
    job = run_ranks(n, "kill_ranks.py", timeout, mode, timeout=timeout + 90,
                    expect_ok=False)
    assert job.returncodes[n - 1] != 0
    for rank in range(n - 1):
        out = job.outputs[rank]
        assert job.returncodes[rank] == 0, out
        raised = job.lines(rank, "RAISED")
        assert raised, out
        took = float(raised[0].split()[0])
        # Within the timeout (a stopped rank: at the deadline, not before).
        assert took < timeout + 5, out
        if mode == "stop":
            assert took > timeout * 0.8, out
            # Rank 0 reaches its deadline; another rank may instead see
            # rank 0 leave (it exits after killing the stopped rank).
            assert "RINGCC_ERR_TIMEOUT" in raised[0] or (
                rank > 0 and "RINGCC_ERR_PEER_FAILED" in raised[0]), out
        else:
            assert "RINGCC_ERR_PEER_FAILED" in raised[0] and "died" in \
                raised[0], out
        assert re.search(r"LATER wait raised: .*RINGCC_ERR", out), out
        assert re.search(r"LATER future raised: .*RINGCC_ERR", out), out


@pytest.mark.parametrize("n,nkill", [(3, 1), (4, 2)])
def test_training_goes_on_after_shrink(n, nkill):
    job = run_ranks(n, "shrink_ranks.py", nkill, timeout=240,
                    expect_ok=False)
    for rank in range(n - nkill, n):
        assert job.returncodes[rank] != 0, job.outputs[rank]
    for rank in range(n - nkill):
        out = job.outputs[rank]
        assert job.returncodes[rank] == 0, out
        assert job.lines(rank, "RAISED"), out
        assert job.lines(rank, "SHRUNK")[0].split() == [str(rank),
                                                         str(n - nkill)], out
        assert float(job.lines(rank, "PARAMS")[0]) == 0.0, out
        assert int(job.lines(rank, "DONE")[0]) == 15, out
