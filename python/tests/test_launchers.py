"""test_launchers.py - ringcc.Comm.from_env() and a C example under the real
torchrun of this venv: --standalone and --rdzv-backend c10d, 2 to 4
processes. The library meets through torchrun's own TCPStore (rank 0 sets
its unique id there), so nothing but torchrun's variables is needed; the
C-side tests of every launcher are in test/test_launch.c (make
launch-check)."""

import os
import socket
import subprocess
import sys

import pytest

import ringcc

TESTS = os.path.dirname(os.path.abspath(__file__))
RANK_SCRIPT = os.path.join(TESTS, "ranks", "launch_ranks.py")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
EXAMPLE = os.path.join(TESTS, "..", "..", "build", "examples", "allreduce")

pytestmark = pytest.mark.skipif(not os.access(TORCHRUN, os.X_OK),
                                reason=f"no torchrun next to {sys.executable}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    """This process's environment without any launcher's variables; the
    ranks import the ringcc package this process imported."""
    drop = ("RINGCC_RANK", "RINGCC_NRANKS", "RINGCC_ROOT", "RINGCC_SECRET",
            "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
            "GROUP_RANK", "OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items()
           if not any(k == d or (d.endswith("_") and k.startswith(d))
                      for d in drop)}
    parent = os.path.dirname(os.path.dirname(os.path.abspath(ringcc.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        [parent] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def torchrun(nproc, c10d, program, timeout=150):
    rdzv = (["--nnodes=1", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{free_port()}"] if c10d
            else ["--standalone"])
    cmd = [TORCHRUN, *rdzv, f"--nproc-per-node={nproc}", *program]
    p = subprocess.run(cmd, env=clean_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}"
    return p.stdout


@pytest.mark.parametrize("nproc,c10d", [(2, False), (4, True)])
def test_from_env_under_torchrun(nproc, c10d):
    out = torchrun(nproc, c10d, [RANK_SCRIPT, "from_env"])
    for r in range(nproc):
        assert f"launch ok rank {r} of {nproc}" in out, out


def test_from_env_beside_torch_distributed():
    out = torchrun(2, True, [RANK_SCRIPT, "with_torch"])
    for r in range(2):
        assert f"launch ok rank {r} of 2" in out, out


@pytest.mark.skipif(not os.access(EXAMPLE, os.X_OK),
                    reason="build/examples/allreduce is not built (make)")
@pytest.mark.parametrize("nproc,c10d", [(3, False)])
def test_c_example_under_torchrun(nproc, c10d):
    out = torchrun(nproc, c10d, ["--no-python", EXAMPLE])
    for r in range(nproc):
        assert f"rank {r} of {nproc}: sum {nproc * (nproc + 1) // 2}, " \
               "0 wrong elements" in out, out


@pytest.mark.skipif(not os.access(EXAMPLE, os.X_OK),
                    reason="build/examples/allreduce is not built (make)")
@pytest.mark.parametrize("use_libuv", [True, False])
def test_c_ranks_on_torch_tcpstore(use_libuv):
    """The C client against both of torch's TCPStore servers (libuv, the
    default since torch 2.4, and the classic one): 3 ranks of the C example
    given torchrun's variables around a store this test serves; the id rank
    0 set is then readable through torch's own client under the documented
    key."""
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=use_libuv,
                          wait_for_workers=False)
    env = clean_env()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
               TORCHELASTIC_RUN_ID="rcc-store-test", GROUP_RANK="0",
               TORCHELASTIC_USE_AGENT_STORE="True", WORLD_SIZE="3")
    procs = [subprocess.Popen([EXAMPLE], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and \
            f"rank {r} of 3: sum 6, 0 wrong elements" in out, out
    uid = store.get("ringcc/rcc-store-test/0/init_env.0/id")
    assert len(uid) == 128, len(uid)
