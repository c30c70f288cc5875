# torch 1.13's side of TestZeroMatchesTorch (zero_torch_test.go): torch DDP
# (gloo, float64) with ZeroRedundancyOptimizer trains ddp-train's MLP from
# the same initial weights on the same data, DistributedSampler(shuffle=False),
# for each case's world size and optimizer; rank 0 writes every case's final
# parameters in ddp-train's layout (weights [in, out]).
#
#   python3 torch_zero.py SPEC.json OUT.json
#
# SPEC: {"init": DIR, "x": X.npy, "y": Y.npy, "batch": B, "hidden": [...],
#        "cases": [{"name", "world", "steps", "lr", "optimizer", "kwargs"}]}
import os
import sys

import torch
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recipes import model_from, params_of, run_worlds, shard_batches  # noqa: E402  the same model and plumbing


def run_case(rank, world, spec, case, x, y, sizes):
    model = model_from(spec["init"], sizes)
    ddp = DDP(model)
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[case["optimizer"]]
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, lr=case["lr"], **case["kwargs"])
    loss_fn = nn.CrossEntropyLoss()
    for xb, yb in shard_batches(spec, case, x, y, world, rank):
        opt.zero_grad()
        loss_fn(ddp(xb), yb).backward()
        opt.step()
    out = params_of(model)
    owned = sum(p.numel() for p in opt.optim.param_groups[0]["params"])
    return {"params": out, "clipped": 0, "owned_values": owned}


if __name__ == "__main__":
    run_worlds(sys.argv[1], sys.argv[2], run_case)
