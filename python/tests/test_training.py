"""test_training.py - DDP (50 steps) and FSDP2 fully_shard (20 steps) at 2
and 4 ranks over "ringcc", every loss and the final parameters against the
same training over "gloo" in the same job (ranks/train_ranks.py).

At n = 2 the results must be bitwise equal (two addends: the order cannot
differ). At n = 4 the two libraries add the four ranks' gradients in
different orders, so the results must agree within 1e-6 relative (losses
per element, parameters against each tensor's largest magnitude).
"""

import pytest

from launcher import run_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("mode,steps", [("ddp", 50), ("fsdp", 20)])
def test_training_matches_gloo(mode, steps, n):
    job = run_ranks(n, "train_ranks.py", mode, steps, timeout=400)
    for rank in range(n):
        losses = job.lines(rank, "LOSSES")[0]
        params = job.lines(rank, "PARAMS")[0]
        assert f"steps={steps}" in losses
        want = ("bitwise",) if n == 2 else ("bitwise", "close")
        assert losses.split()[0] in want, job.outputs[rank]
        assert params.split()[0] in want, job.outputs[rank]
