"""Torch 1.13's ZeroRedundancyOptimizer partition for the cases on stdin.

Input: JSON [{"world": W, "groups": [[numel, ...], ...]}, ...]. Output: for each case, the owner rank of each
parameter, per group, as torch's own ZeroRedundancyOptimizer._partition_parameters assigns them. The method
is run unbound on an object carrying only what it reads (world_size, param_groups, its cache), so no process
group is needed.
"""
import json
import sys
import types

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer as Z


def partition(world, groups):
    tensors = [[torch.zeros(n) for n in g] for g in groups]
    z = types.SimpleNamespace(world_size=world, param_groups=[{"params": ts} for ts in tensors],
                              _partition_parameters_cache=[])
    z._get_min_index = lambda values, disallowed_indices=None: Z._get_min_index(z, values, disallowed_indices)
    z._partition_param_group = lambda group, per_rank: Z._partition_param_group(z, group, per_rank)
    per_rank = Z._partition_parameters(z)
    owner = {}
    for rank, rank_groups in enumerate(per_rank):
        for g in rank_groups:
            for p in g["params"]:
                owner[id(p)] = rank
    return [[owner[id(t)] for t in ts] for ts in tensors]


cases = json.load(sys.stdin)
json.dump([partition(c["world"], c["groups"]) for c in cases], sys.stdout)
