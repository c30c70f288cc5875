"""Runs torch's gradient clipping on the cases optim's TestClipMatchesTorch writes.

Usage: clip_torch.py CASES.json > RESULTS.json

Every float crosses as the integer bits of its float64 value (a float32 value is exact in float64), so that
nothing is rounded on the way and NaN and infinities survive JSON. One case:
  {"dtypes": ["float32", ...], "shapes": [[7, 5], ...], "grads": [[bits...] or null, ...],
   "kind": "norm" or "value", "max_norm": bits, "norm_type": bits, "clip_value": bits}
A null gradient is a parameter whose .grad is None. Each result: {"total_norm": bits or null,
"grads": [[bits...] or null, ...]}. The first line of the output object says which CPU kernels torch used.
"""
import json
import struct
import sys

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def f(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def run(case):
    params = []
    for dtype, shape, g in zip(case["dtypes"], case["shapes"], case["grads"]):
        p = torch.nn.Parameter(torch.zeros(shape, dtype=DTYPES[dtype]))
        if g is not None:
            p.grad = torch.tensor([f(b) for b in g], dtype=torch.float64).to(DTYPES[dtype]).reshape(shape)
        params.append(p)
    total = None
    if case["kind"] == "norm":
        total = bits(torch.nn.utils.clip_grad_norm_(params, f(case["max_norm"]), f(case["norm_type"])).item())
    else:
        torch.nn.utils.clip_grad_value_(params, f(case["clip_value"]))
    grads = [None if p.grad is None else [bits(v) for v in p.grad.reshape(-1).double().tolist()] for p in params]
    return {"total_norm": total, "grads": grads}


def main():
    # One thread: torch splits a sum of 32768 or more elements among its threads (optim's Note [clip arithmetic]).
    torch.set_num_threads(1)
    with open(sys.argv[1]) as fh:
        cases = json.load(fh)
    capability = torch.__config__.show().split("CPU capability usage:")[1].split()[0]
    json.dump({"torch": torch.__version__, "capability": capability, "results": [run(c) for c in cases]},
              sys.stdout)


if __name__ == "__main__":
    main()
