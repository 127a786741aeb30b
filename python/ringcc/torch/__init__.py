"""ringcc.torch - registers the torch.distributed backend "ringcc".

    import torch.distributed as dist
    import ringcc.torch                      # registers "ringcc"
    dist.init_process_group("ringcc")         # under torchrun; or with
                                              # store=, rank=, world_size=

Every process group of the backend is a ProcessGroupRingcc (_backend.py):
one libringcc communicator joined through torch's store, a worker thread
that runs the operations in order (async_op=True returns at once), and
futures completed with the output tensors. docs/python.md lists what is
supported.
"""

import torch.distributed as dist

from ._backend import ProcessGroupRingcc, create, ringcc_op

BACKEND_NAME = "ringcc"

if BACKEND_NAME.upper() not in getattr(dist.Backend, "_plugins", {}):
    dist.Backend.register_backend(BACKEND_NAME, create,
                                  devices=["cpu", "cuda"])

__all__ = ["ProcessGroupRingcc", "BACKEND_NAME", "create", "ringcc_op"]
