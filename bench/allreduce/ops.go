package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// collective is one operation the benchmark can time, with nccl-tests'
// conventions for it (src/<op>.cu: GetCollByteCount and GetBw).
//
// For a requested size S and element size e, nccl-tests derives a count
// c = S/e and, for the chunked collectives, a per-rank count c/n. Its
// "count" column is that parameter count, its "size" column the larger
// of this rank's send and receive buffers, and algbw divides the bytes
// its GetBw names by the time. For every collective here that byte
// count equals the size column:
//
//	op             count      size = algbw bytes   busbw factor
//	allreduce      S/e        count·e              2(n-1)/n
//	broadcast      S/e        count·e              1
//	reduce         S/e        count·e              1
//	sendrecv       S/e        count·e              1
//	allgather      S/e/n      count·n·e            (n-1)/n
//	reducescatter  S/e/n      count·n·e            (n-1)/n
//	alltoall       S/e/n      count·n·e            (n-1)/n
//	gather         S/e/n      count·n·e            (n-1)/n
//	scatter        S/e/n      count·n·e            (n-1)/n
//
// (Recent nccl-tests also round gather's per-rank count down to a
// multiple of 16 bytes; this command does not.)
type collective struct {
	name     string
	chunked  bool // nccl-tests' count is the per-rank chunk, S/e/n
	rooted   bool // has a root (printed in the root column)
	reduces  bool // takes a reduction op (printed in the redop column)
	sizeless bool // moves no data (barrier): timed once, whatever --sizes says, as 0 bytes
	factor   func(n int) float64
	formula  string // factor, as text
	// iface names the optional interface the op needs, "" for none.
	iface string
	// prepare allocates one rank's buffers and returns a function that
	// runs the op once and waits for it. It fails when g lacks the op.
	prepare func(g pg.ProcessGroup, d pg.Dtype, count, root int) (func(context.Context) error, error)
}

func allReduceFactor(n int) float64 { return 2 * float64(n-1) / float64(n) }
func chunkFactor(n int) float64     { return float64(n-1) / float64(n) }
func unitFactor(int) float64        { return 1 }

// collectives lists every op in the order --op all runs them.
func collectives() []collective {
	return []collective{
		{name: "allreduce", reduces: true, factor: allReduceFactor, formula: "2(n-1)/n", prepare: prepAllReduce},
		{name: "allgather", chunked: true, factor: chunkFactor, formula: "(n-1)/n", prepare: prepAllGather},
		{name: "reducescatter", chunked: true, reduces: true, factor: chunkFactor, formula: "(n-1)/n",
			prepare: prepReduceScatter},
		{name: "alltoall", chunked: true, factor: chunkFactor, formula: "(n-1)/n", iface: "pg.AllToAller",
			prepare: prepAllToAll},
		{name: "broadcast", rooted: true, factor: unitFactor, formula: "1", prepare: prepBroadcast},
		{name: "reduce", rooted: true, reduces: true, factor: unitFactor, formula: "1", iface: "pg.Rooted",
			prepare: prepReduce},
		{name: "gather", chunked: true, rooted: true, factor: chunkFactor, formula: "(n-1)/n", iface: "pg.Rooted",
			prepare: prepGather},
		{name: "scatter", chunked: true, rooted: true, factor: chunkFactor, formula: "(n-1)/n", iface: "pg.Rooted",
			prepare: prepScatter},
		{name: "sendrecv", factor: unitFactor, formula: "1", iface: "pg.PointToPoint", prepare: prepSendRecv},
		{name: "barrier", sizeless: true, factor: unitFactor, formula: "1", prepare: prepBarrier},
	}
}

// lookupOps parses --op: one name, a comma-separated list, or all.
func lookupOps(s string) ([]collective, error) {
	if s == "all" {
		return collectives(), nil
	}
	var out []collective
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, c := range collectives() {
			if c.name == name {
				out, found = append(out, c), true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("--op %q: want all or a comma-separated list of %s", name, opNames())
		}
	}
	return out, nil
}

func opNames() string {
	all := collectives()
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// layout returns nccl-tests' count column for a requested size of size
// bytes on n ranks, and the bytes of its size column (which algbw
// divides by the time).
func (c collective) layout(size int, d pg.Dtype, n int) (count, bytes int) {
	if c.sizeless {
		return 0, 0
	}
	count = size / d.Size()
	if c.chunked {
		count /= n
		return count, count * n * d.Size()
	}
	return count, count * d.Size()
}

// check reports why c cannot run on g, or nil. Every rank gets the same
// answer: it depends only on the backend and the group size.
func (c collective) check(g pg.ProcessGroup) error {
	ok := true
	switch c.iface {
	case "pg.AllToAller":
		var x pg.AllToAller
		ok = pg.As(g, &x)
	case "pg.Rooted":
		var x pg.Rooted
		ok = pg.As(g, &x)
	case "pg.PointToPoint":
		var x pg.PointToPoint
		ok = pg.As(g, &x)
	}
	if !ok {
		return unsupported(g, c.name, c.iface)
	}
	if c.name == "sendrecv" && g.Size() < 2 {
		return fmt.Errorf("sendrecv: needs at least 2 ranks (a rank cannot send to itself); use --nproc 2 or more")
	}
	return nil
}

func unsupported(g pg.ProcessGroup, op, iface string) error {
	return fmt.Errorf("%s: the %s backend does not implement %s: %w", op, pg.BackendName(g), iface, pg.ErrUnsupported)
}

func waitFor(issue func(ctx context.Context) pg.Work) func(context.Context) error {
	return func(ctx context.Context) error { return issue(ctx).Wait(ctx) }
}

// Buffers hold zeros: zeros stay zeros under repeated sums, so there is
// no overflow and no denormals, for any dtype.

func prepAllReduce(g pg.ProcessGroup, d pg.Dtype, count, _ int) (func(context.Context) error, error) {
	t := pg.NewTensor(d, count)
	return waitFor(func(ctx context.Context) pg.Work { return g.AllReduce(ctx, t, pg.Op(pg.Sum)) }), nil
}

// prepAllReduceGroupBuffer is prepAllReduce on memory from the group
// when it hands some out (backend.HostBufferAllocator: pg/tcp's shared-memory
// arena, which the ranks of a host read in place), as the reducer keeps
// its buckets; elsewhere, or when the group has no room, on the heap. The
// buffer lives as long as the process.
func prepAllReduceGroupBuffer(g pg.ProcessGroup, d pg.Dtype, count, root int) (func(context.Context) error, error) {
	var a backend.HostBufferAllocator
	if !pg.As(g, &a) || count == 0 {
		return prepAllReduce(g, d, count, root)
	}
	b, err := a.NewHostBuffer(d, count)
	if err != nil {
		return prepAllReduce(g, d, count, root)
	}
	t := b.Tensor()
	return waitFor(func(ctx context.Context) pg.Work { return g.AllReduce(ctx, t, pg.Op(pg.Sum)) }), nil
}

func prepBarrier(g pg.ProcessGroup, _ pg.Dtype, _, _ int) (func(context.Context) error, error) {
	return waitFor(g.Barrier), nil
}

func prepBroadcast(g pg.ProcessGroup, d pg.Dtype, count, root int) (func(context.Context) error, error) {
	t := pg.NewTensor(d, count)
	return waitFor(func(ctx context.Context) pg.Work { return g.Broadcast(ctx, t, root) }), nil
}

func prepAllGather(g pg.ProcessGroup, d pg.Dtype, count, _ int) (func(context.Context) error, error) {
	out, in := pg.NewTensor(d, count*g.Size()), pg.NewTensor(d, count)
	return waitFor(func(ctx context.Context) pg.Work { return g.AllGather(ctx, out, in) }), nil
}

func prepReduceScatter(g pg.ProcessGroup, d pg.Dtype, count, _ int) (func(context.Context) error, error) {
	out, in := pg.NewTensor(d, count), pg.NewTensor(d, count*g.Size())
	return waitFor(func(ctx context.Context) pg.Work { return g.ReduceScatter(ctx, out, in, pg.Op(pg.Sum)) }), nil
}

func prepAllToAll(g pg.ProcessGroup, d pg.Dtype, count, _ int) (func(context.Context) error, error) {
	var a pg.AllToAller
	if !pg.As(g, &a) {
		return nil, unsupported(g, "alltoall", "pg.AllToAller")
	}
	out, in := pg.NewTensor(d, count*g.Size()), pg.NewTensor(d, count*g.Size())
	return waitFor(func(ctx context.Context) pg.Work { return a.AllToAll(ctx, out, in, nil, nil) }), nil
}

func prepReduce(g pg.ProcessGroup, d pg.Dtype, count, root int) (func(context.Context) error, error) {
	var r pg.Rooted
	if !pg.As(g, &r) {
		return nil, unsupported(g, "reduce", "pg.Rooted")
	}
	t := pg.NewTensor(d, count)
	return waitFor(func(ctx context.Context) pg.Work { return r.Reduce(ctx, t, root, pg.Op(pg.Sum)) }), nil
}

// prepGather gives only the root the gathered buffer, as pg.Rooted
// allows.
func prepGather(g pg.ProcessGroup, d pg.Dtype, count, root int) (func(context.Context) error, error) {
	var r pg.Rooted
	if !pg.As(g, &r) {
		return nil, unsupported(g, "gather", "pg.Rooted")
	}
	in, out := pg.NewTensor(d, count), pg.NewTensor(d, 0)
	if g.Rank() == root {
		out = pg.NewTensor(d, count*g.Size())
	}
	return waitFor(func(ctx context.Context) pg.Work { return r.Gather(ctx, out, in, root) }), nil
}

// prepScatter gives only the root the buffer to scatter.
func prepScatter(g pg.ProcessGroup, d pg.Dtype, count, root int) (func(context.Context) error, error) {
	var r pg.Rooted
	if !pg.As(g, &r) {
		return nil, unsupported(g, "scatter", "pg.Rooted")
	}
	out, in := pg.NewTensor(d, count), pg.NewTensor(d, 0)
	if g.Rank() == root {
		in = pg.NewTensor(d, count*g.Size())
	}
	return waitFor(func(ctx context.Context) pg.Work { return r.Scatter(ctx, out, in, root) }), nil
}

// prepSendRecv is nccl-tests' sendrecv: a ring in which every rank sends
// count elements to rank+1 and receives as many from rank-1 at once.
func prepSendRecv(g pg.ProcessGroup, d pg.Dtype, count, _ int) (func(context.Context) error, error) {
	var p pg.PointToPoint
	if !pg.As(g, &p) {
		return nil, unsupported(g, "sendrecv", "pg.PointToPoint")
	}
	n, r := g.Size(), g.Rank()
	if n < 2 {
		return nil, fmt.Errorf("sendrecv: needs at least 2 ranks (a rank cannot send to itself); use --nproc 2 or more")
	}
	send, recv := pg.NewTensor(d, count), pg.NewTensor(d, count)
	return func(ctx context.Context) error {
		s := p.Send(ctx, send, (r+1)%n, 0)
		v := p.Recv(ctx, recv, (r-1+n)%n, 0)
		return pg.WaitAll(ctx, s, v)
	}, nil
}

// helpText heads --help: the sizes and bus factors of every op.
const helpText = `Times collectives as nccl-tests does and prints, per size, nccl-tests'
size, count, type, redop, root, time, algbw and busbw.

For a requested size S (bytes, --sizes) and element size e on n ranks:
  op             count (elements)   size (bytes)   busbw = algbw x
  allreduce      S/e                count*e        2(n-1)/n
  broadcast      S/e                count*e        1
  reduce         S/e                count*e        1
  sendrecv       S/e                count*e        1   (ring: send to rank+1, receive from rank-1)
  allgather      S/e/n (per rank)   count*n*e      (n-1)/n
  reducescatter  S/e/n (per rank)   count*n*e      (n-1)/n
  alltoall       S/e/n (per peer)   count*n*e      (n-1)/n
  gather         S/e/n (per rank)   count*n*e      (n-1)/n
  scatter        S/e/n (per rank)   count*n*e      (n-1)/n
algbw = size/time. Size is the larger of a rank's send and receive
buffers. The counts, sizes and factors are nccl-tests' (src/*.cu,
GetCollByteCount and GetBw); busbw compares with the per-rank
unidirectional link bandwidth for any n.
`
