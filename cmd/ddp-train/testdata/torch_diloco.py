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
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recipes import model_from  # noqa: E402  the same model, from the same files


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
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(TensorDataset(x, y), batch_size=spec["batch"], sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    step, epoch = 0, 0
    while step < case["steps"]:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step == case["steps"]:
                break
            inner.zero_grad()
            loss_fn(model(xb), yb).backward()
            inner.step()
            step += 1
            if step % case["h"] == 0:
                outer_sync(model, global_model, outer, world)
        epoch += 1
    out = {}
    linears = [m for m in global_model if isinstance(m, nn.Linear)]
    for k, lin in enumerate(linears):
        out["fc%d.weight" % (k + 1)] = lin.weight.detach().numpy().T.reshape(-1).tolist()
        out["fc%d.bias" % (k + 1)] = lin.bias.detach().numpy().reshape(-1).tolist()
    return {"params": out, "clipped": 0}


def worker(rank, world, spec_path, out_path, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    with open(spec_path) as f:
        spec = json.load(f)
    x = torch.from_numpy(np.load(spec["x"]).astype(np.float64))
    y = torch.from_numpy(np.load(spec["y"]).astype(np.int64))
    sizes = [x.shape[1]] + spec["hidden"] + [int(y.max()) + 1]
    results = {}
    for c in spec["cases"]:
        if c["world"] == world:
            results[c["name"]] = run_case(rank, world, spec, c, x, y, sizes)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        worlds = sorted({c["world"] for c in json.load(f)["cases"]})
    merged = {}
    for world in worlds:
        fd, init_file = tempfile.mkstemp()
        os.close(fd)
        os.remove(init_file)
        part = sys.argv[2] + ".%d" % world
        mp.spawn(worker, args=(world, sys.argv[1], part, init_file), nprocs=world)
        with open(part) as f:
            merged.update(json.load(f))
    with open(sys.argv[2], "w") as f:
        json.dump(merged, f)
