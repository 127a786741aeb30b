"""allreduce_numpy.py - the Python counterpart of allreduce.c: every rank
adds its NumPy array into everyone's, and checks the sum.

    pip install ./python
    build/bin/ringcc-run -np 4 python3 examples/allreduce_numpy.py

Any launcher works (mpirun, srun, torchrun-style variables): the
communicator comes from the environment, as ringcc_comm_init_env does.
"""

import numpy as np

import ringcc


def main():
    with ringcc.Comm.from_env() as comm:
        n, rank = comm.size, comm.rank
        x = np.full(1 << 20, rank, dtype=np.float32)   # 4 MiB per rank
        comm.allreduce(x)                              # in place, "sum"
        expected = n * (n - 1) / 2
        ok = bool((x == expected).all())
        print(f"rank {rank} of {n}: x[0] = {x[0]:g} (expected {expected:g}) "
              f"{'ok' if ok else 'WRONG'}")

        # Out of place, another op, another datatype.
        y = np.arange(8, dtype=np.int64) * (rank + 1)
        out = np.empty_like(y)
        comm.allreduce(y, out, op="max")
        ok &= bool((out == np.arange(8) * n).all())

        # Every rank's block, gathered on every rank.
        blocks = np.empty((n, 3), dtype=np.float64)
        comm.allgather(np.full(3, rank, dtype=np.float64), blocks)
        ok &= bool((blocks[:, 0] == np.arange(n)).all())
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
