# torch 1.13's side of TestRecipesMatchTorch (recipes_torch_test.go): two
# ranks of torch DDP (gloo, float64) train ddp-train's MLP from the same
# initial weights on the same data, DistributedSampler(shuffle=False),
# with each case's optimizer, learning-rate schedule and clipping; rank 0
# writes every case's final parameters, in ddp-train's layout (weights
# [in, out]), how many steps the clipping changed a gradient, and the
# parameters of the same run without its schedule, its clipping and its
# optimizer arguments (each where the case has one).
#
#   python3 torch_recipes.py SPEC.json OUT.json
#
# SPEC: {"init": DIR, "x": X.npy, "y": Y.npy, "batch": B, "hidden": [...], "cases": [{"name", "steps", "lr",
#        "optimizer", "kwargs", "schedule": {"kind", "warmup", "start_factor", "min_lr", "step_size", "gamma"},
#        "clip_norm", "clip_value"}]}
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import lr_scheduler as sch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WORLD = 2


def model_from(init, sizes):
    layers = []
    for k in range(len(sizes) - 1):
        lin = nn.Linear(sizes[k], sizes[k + 1]).double()
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.load(os.path.join(init, "fc%d.weight.npy" % (k + 1))).T.copy()))
            lin.bias.copy_(torch.from_numpy(np.load(os.path.join(init, "fc%d.bias.npy" % (k + 1)))))
        layers.append(lin)
        if k < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def optimizer(case, params):
    kw = dict(case["kwargs"])
    if "betas" in kw:
        kw["betas"] = tuple(kw["betas"])
    name = case["optimizer"]
    if name == "momentum":
        kw.setdefault("momentum", 0.9)
    cls = {"sgd": torch.optim.SGD, "momentum": torch.optim.SGD, "adam": torch.optim.Adam,
           "adamw": torch.optim.AdamW}[name]
    return cls(params, lr=case["lr"], **kw)


def main_schedule(case, opt):
    s, lr = case["schedule"], case["lr"]
    rest, kind = case["steps"] - s.get("warmup", 0), s.get("kind", "constant")
    if kind == "cosine":
        return sch.CosineAnnealingLR(opt, T_max=rest, eta_min=s.get("min_lr", 0.0))
    if kind == "linear":
        return sch.LinearLR(opt, start_factor=1.0, end_factor=s.get("min_lr", 0.0) / lr, total_iters=rest)
    if kind == "step":
        return sch.StepLR(opt, step_size=s["step_size"], gamma=s.get("gamma", 0.1))
    return sch.ConstantLR(opt, factor=1.0, total_iters=0)


def schedule(case, opt):
    """SequentialLR([LinearLR(F, 1, W), MAIN], [W]) made in the order a user writes it; MAIN alone for W = 0."""
    s = case["schedule"]
    w = s.get("warmup", 0)
    if w == 0:
        return main_schedule(case, opt)
    warm = sch.LinearLR(opt, start_factor=s.get("start_factor", 1.0 / 3), end_factor=1.0, total_iters=w)
    return sch.SequentialLR(opt, [warm, main_schedule(case, opt)], milestones=[w])


def run_case(rank, spec, case, x, y, sizes):
    model = model_from(spec["init"], sizes)
    ddp = DDP(model)
    opt = optimizer(case, ddp.parameters())
    sched = schedule(case, opt)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=WORLD, rank=rank, shuffle=False)
    loader = DataLoader(TensorDataset(x, y), batch_size=spec["batch"], sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    step, clipped, epoch = 0, 0, 0
    while step < case["steps"]:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step == case["steps"]:
                break
            opt.zero_grad()
            loss_fn(ddp(xb), yb).backward()
            if case.get("clip_norm"):
                total = nn.utils.clip_grad_norm_(ddp.parameters(), case["clip_norm"])
                clipped += int(total > case["clip_norm"])
            if case.get("clip_value"):
                v = case["clip_value"]
                clipped += int(any(bool((p.grad.abs() > v).any()) for p in ddp.parameters()))
                nn.utils.clip_grad_value_(ddp.parameters(), v)
            opt.step()
            sched.step()
            step += 1
        epoch += 1
    return {"params": params_of(model), "clipped": clipped}


def params_of(model):
    """The model's parameters in ddp-train's layout (weights [in, out]), by name."""
    out = {}
    linears = [m for m in model if isinstance(m, nn.Linear)]
    for k, lin in enumerate(linears):
        out["fc%d.weight" % (k + 1)] = lin.weight.detach().numpy().T.reshape(-1).tolist()
        out["fc%d.bias" % (k + 1)] = lin.bias.detach().numpy().reshape(-1).tolist()
    return out


def shard_batches(spec, case, x, y, world, rank):
    """Rank's batches of its DistributedSampler(shuffle=False) shard, epoch
    after epoch, for case["steps"] steps."""
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(TensorDataset(x, y), batch_size=spec["batch"], sampler=sampler)
    step, epoch = 0, 0
    while step < case["steps"]:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step == case["steps"]:
                return
            yield xb, yb
            step += 1
        epoch += 1


def load_data(spec):
    """The spec's data as float64 features and int64 labels, and the MLP's layer sizes."""
    x = torch.from_numpy(np.load(spec["x"]).astype(np.float64))
    y = torch.from_numpy(np.load(spec["y"]).astype(np.int64))
    return x, y, [x.shape[1]] + spec["hidden"] + [int(y.max()) + 1]


def _world_worker(rank, world, spec_path, out_path, init_file, run_case):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    with open(spec_path) as f:
        spec = json.load(f)
    x, y, sizes = load_data(spec)
    results = {}
    for c in spec["cases"]:
        if c["world"] == world:
            results[c["name"]] = run_case(rank, world, spec, c, x, y, sizes)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def run_worlds(spec_path, out_path, run_case):
    """Runs run_case(rank, world, spec, case, x, y, sizes) for every case of
    the spec, one gloo job per world size the cases name, and writes rank
    0's results, by case name, to out_path."""
    with open(spec_path) as f:
        worlds = sorted({c["world"] for c in json.load(f)["cases"]})
    merged = {}
    for world in worlds:
        fd, init_file = tempfile.mkstemp()
        os.close(fd)
        os.remove(init_file)
        part = out_path + ".%d" % world
        mp.spawn(_world_worker, args=(world, spec_path, part, init_file, run_case), nprocs=world)
        with open(part) as f:
            merged.update(json.load(f))
    with open(out_path, "w") as f:
        json.dump(merged, f)


def worker(rank, spec_path, out_path, init_file):
    import warnings
    warnings.simplefilter("ignore")  # SequentialLR's step(0) warns that epoch is deprecated
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    with open(spec_path) as f:
        spec = json.load(f)
    x, y, sizes = load_data(spec)
    results = {}
    for c in spec["cases"]:
        results[c["name"]] = run_case(rank, spec, c, x, y, sizes)
        # The same run without each feature: ddp-train must differ from these, or the comparison proves nothing.
        for what, keys in (("schedule", ["schedule"]), ("clipping", ["clip_norm", "clip_value"]),
                           ("optimizer arguments", ["kwargs"])):
            if any(c.get(k) for k in keys):
                variant = dict(c, **{k: type(c.get(k, 0))() for k in keys})
                results[c["name"]]["without " + what] = run_case(rank, spec, variant, x, y, sizes)["params"]
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    fd, init_file = tempfile.mkstemp()
    os.close(fd)
    os.remove(init_file)
    mp.spawn(worker, args=(sys.argv[1], sys.argv[2], init_file), nprocs=WORLD)
