"""Runs torch 1.13's optimizers and schedulers on the spec read from stdin (JSON) and prints the results (JSON).

The spec: {"params": [[...], ...], "grads": [[[...], ...] per step], "optimizers": [{"name", "args", "schedule"}],
"schedules": [{"lr", "steps", "schedule"}]}. A schedule is {"kind", "warmup", "start_factor", "min_lr", "total",
"step_size", "gamma"}, built as optim.Recipe builds it. The output has, per optimizer, the final parameters, and
per schedule, the rate before each of its steps. Python's float repr round-trips, so every bit comes back.
"""
import json
import sys

import torch

torch.set_num_threads(1)


def main_scheduler(opt, s, lr):
    kind, rest = s["kind"], s.get("total", 0) - s["warmup"]
    if kind == "constant":
        return torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
    if kind == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=rest, eta_min=s["min_lr"])
    if kind == "linear":
        return torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=s["min_lr"] / lr, total_iters=rest)
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=s["step_size"], gamma=s["gamma"])
    raise ValueError(kind)


def build(opt, s, lr):
    """SequentialLR([LinearLR(F, 1, W), MAIN], [W]) made in the order a user writes it; MAIN alone for W = 0."""
    if s["warmup"] == 0:
        return main_scheduler(opt, s, lr)
    warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=s["start_factor"], end_factor=1.0,
                                               total_iters=s["warmup"])
    main = main_scheduler(opt, s, lr)
    return torch.optim.lr_scheduler.SequentialLR(opt, [warmup, main], milestones=[s["warmup"]])


def make(name, params, args):
    args = dict(args)
    if "betas" in args:
        args["betas"] = tuple(args["betas"])
    if name in ("sgd", "momentum"):
        return torch.optim.SGD(params, foreach=False, **args)
    if name == "adam":
        return torch.optim.Adam(params, foreach=False, **args)
    return torch.optim.AdamW(params, foreach=False, **args)


def run_optimizer(spec, o):
    params = [torch.tensor(p, dtype=torch.float64) for p in spec["params"]]
    opt = make(o["name"], params, o["args"])
    sched = build(opt, o["schedule"], o["args"]["lr"]) if o.get("schedule") else None
    for grads in spec["grads"]:
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        if sched is not None:
            sched.step()
    return [p.tolist() for p in params]


def run_schedule(s):
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([p], lr=s["lr"])
    sched = build(opt, s["schedule"], s["lr"])
    rates = []
    for _ in range(s["steps"]):
        rates.append(opt.param_groups[0]["lr"])
        p.grad = torch.zeros(1, dtype=torch.float64)
        opt.step()
        sched.step()
    return rates


def main():
    import warnings
    warnings.simplefilter("ignore")  # SequentialLR's step(0) warns that epoch is deprecated
    spec = json.load(sys.stdin)
    out = {"version": torch.__version__,
           "optimizers": [run_optimizer(spec, o) for o in spec["optimizers"]],
           "schedules": [run_schedule(s) for s in spec["schedules"]]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
