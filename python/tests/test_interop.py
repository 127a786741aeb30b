"""test_interop.py - arrays as users hold them, each rank its own process
(ranks/interop_ranks.py): bfloat16 and float8 NumPy arrays of ml_dtypes
through every collective and op; DLPack 1.x (versioned) and 0.x exchange
with NumPy and torch both ways; mpi4py's spelling of the calls; premul-sum
ops (Comm.premul_sum). n = 1..4.
"""

import pytest

from launcher import run_ranks


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("check", ["ml_dtypes", "dlpack", "mpi4py", "premul"])
def test_interop(check, n):
    if check in ("ml_dtypes", "premul"):
        pytest.importorskip("ml_dtypes")
    if check == "dlpack":
        pytest.importorskip("torch")
    job = run_ranks(n, "interop_ranks.py", check, timeout=240)
    counts = [int(c) for rank in range(n) for c in job.lines(rank, "CHECKED")]
    assert len(counts) == n and min(counts) > 0, job.outputs[0]
