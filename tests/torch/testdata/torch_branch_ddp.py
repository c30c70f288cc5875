"""torch's DDP on the branch model of replica_test.go (issue 20).

Run once per rank: python3 torch_branch_ddp.py IN.json RANK WORLD INIT_FILE OUT.json
IN.json holds the mode, each rank's head, the initial parameters and each
rank's batches; OUT.json gets the parameters after the last step. The
model is replica_test.go's: h = tanh(x·W1 + b1), heads fc2(h) = h·W2 + b2
and fc3(h) = h·W3 + b3, combined by the rank's head, the loss the mean over
rows of -sum(y * log_softmax(logits)), float64, SGD, optimizer.zero_grad()
with torch 1.13's default (set_to_none=False).
"""
import json
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]


class Branch(torch.nn.Module):
    def __init__(self, init, head):
        super().__init__()
        self.head = head
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.tensor(init[n]["data"], dtype=torch.float64).reshape(init[n]["shape"])) for n in NAMES])

    def fc(self, k, h):
        return h @ self.ps[2 * k - 2] + self.ps[2 * k - 1]

    def forward(self, x):
        h = torch.tanh(x @ self.ps[0] + self.ps[1])
        if self.head == "sum":
            return self.fc(2, h) + self.fc(3, h)
        if self.head == "fc2":
            return self.fc(2, h)
        if self.head == "fc3":
            return self.fc(3, h)
        raise ValueError(self.head)


def main():
    inp, rank, world, init_file, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    with open(inp) as f:
        spec = json.load(f)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    model = Branch(spec["init"], spec["heads"][rank])
    ddp = DDP(model, find_unused_parameters=spec["mode"] == "unused", static_graph=spec["mode"] == "static")
    opt = torch.optim.SGD(ddp.parameters(), lr=spec["lr"])
    for batch in spec["batches"][rank]:
        x = torch.tensor(batch["x"], dtype=torch.float64).reshape(batch["rows"], -1)
        y = torch.tensor(batch["y"], dtype=torch.float64).reshape(batch["rows"], -1)
        opt.zero_grad()
        logits = ddp(x)
        loss = -(y * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
        loss.backward()
        opt.step()
    with open(out, "w") as f:
        json.dump({n: p.detach().reshape(-1).tolist() for n, p in zip(NAMES, model.ps)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
