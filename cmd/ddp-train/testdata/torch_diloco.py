# The torch 1.13 reference of TestDiLoCoMatchesTorch (diloco_torch_test.go):
# DiLoCo (Douillard et al. 2023, Algorithm 1) in plain torch, float64, gloo.
# Each rank trains ddp-train's MLP from the same initial weights with its
# own inner optimizer on its DistributedSampler(shuffle=False) shard, with
# no gradient communication; after every H inner steps the pseudo-gradient
# (global minus local parameters) is averaged over the ranks and an outer
# SGD with Nesterov momentum steps the global parameters, from which every
# rank continues. Rank 0 writes each case's final global parameters in
# ddp-train's layout (weights [in, out]).
#
#   python3 torch_diloco.py SPEC.json OUT.json
#
# SPEC: {"init": DIR, "x": X.npy, "y": Y.npy, "batch": B, "hidden": [...],
#        "cases": [{"name", "world", "steps", "lr", "optimizer", "kwargs", "h", "outer_lr", "outer_momentum"}]}
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recipes import model_from, params_of, run_worlds, shard_batches  # noqa: E402  the same model and plumbing


def outer_sync(model, global_model, outer_opt, world):
    with torch.no_grad():
        for p, g in zip(model.parameters(), global_model.parameters()):
            delta = (g - p) / world  # the paper's sign: global minus local
            dist.all_reduce(delta)
            g.grad = delta
    outer_opt.step()
    outer_opt.zero_grad()
    with torch.no_grad():
        for p, g in zip(model.parameters(), global_model.parameters()):
            p.copy_(g)


def run_case(rank, world, spec, case, x, y, sizes):
    model = model_from(spec["init"], sizes)
    global_model = copy.deepcopy(model)
    cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[case["optimizer"]]
    inner = cls(model.parameters(), lr=case["lr"], **case["kwargs"])
    mom = case["outer_momentum"]
    outer = torch.optim.SGD(global_model.parameters(), lr=case["outer_lr"], momentum=mom, nesterov=mom > 0)
    loss_fn = nn.CrossEntropyLoss()
    for step, (xb, yb) in enumerate(shard_batches(spec, case, x, y, world, rank), 1):
        inner.zero_grad()
        loss_fn(model(xb), yb).backward()
        inner.step()
        if step % case["h"] == 0:
            outer_sync(model, global_model, outer, world)
    out = params_of(global_model)
    return {"params": out, "clipped": 0}


if __name__ == "__main__":
    run_worlds(sys.argv[1], sys.argv[2], run_case)
