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
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recipes import model_from  # noqa: E402  the same model, from the same files


def run_case(rank, world, spec, case, x, y, sizes):
    model = model_from(spec["init"], sizes)
    ddp = DDP(model)
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[case["optimizer"]]
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, lr=case["lr"], **case["kwargs"])
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(TensorDataset(x, y), batch_size=spec["batch"], sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    step, epoch = 0, 0
    while step < case["steps"]:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step == case["steps"]:
                break
            opt.zero_grad()
            loss_fn(ddp(xb), yb).backward()
            opt.step()
            step += 1
        epoch += 1
    out = {}
    linears = [m for m in model if isinstance(m, nn.Linear)]
    for k, lin in enumerate(linears):
        out["fc%d.weight" % (k + 1)] = lin.weight.detach().numpy().T.reshape(-1).tolist()
        out["fc%d.bias" % (k + 1)] = lin.bias.detach().numpy().reshape(-1).tolist()
    owned = sum(p.numel() for p in opt.optim.param_groups[0]["params"])
    return {"params": out, "clipped": 0, "owned_values": owned}


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
