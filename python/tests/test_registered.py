"""test_registered.py - ringcc.empty: arrays in registered memory, on which
collectives among the ranks of one host run zero-copy
(ranks/registered_ranks.py), each rank its own process."""

import pytest

from launcher import run_ranks


def checked(job):
    return min(int(c) for rank in range(len(job.outputs))
               for c in job.lines(rank, "CHECKED"))


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("check", ["zero_copy", "errors"])
def test_empty(check, n):
    job = run_ranks(n, "registered_ranks.py", check, timeout=120)
    assert checked(job) > 0, job.outputs[0]
