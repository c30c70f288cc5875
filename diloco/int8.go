package diloco

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
)

// int8Block is how many values share one scale when a pseudo-gradient
// travels as int8.
const int8Block = 256

// Note [int8 pseudo-gradients]: an int8 sum of N ranks' int8 values
// would overflow, so the reduction is a reduce-scatter and an allgather
// made of two collectives, each moving int8 values with a float32 scale
// per int8Block of them:
//
//  1. (send) every rank cuts its Δ/N into N equal chunks (the last
//     padded), quantizes each (scale = max|x|/127 per block, q =
//     round(x/scale) in [−127, 127]) and sends chunk j to rank j
//     (AllToAll);
//  2. (the next DiLoCo step, or at once with Delay 0) rank j dequantizes
//     the N pieces of its chunk and adds them in rank order, quantizes the
//     sum the same way and allgathers it;
//  3. (apply) every rank dequantizes every chunk: the same values on every
//     rank, a quarter of a float32 allreduce's bytes.
//
// Both collectives are issued from Step, on the caller's goroutine, at
// steps every rank agrees on, so they line up with the run's other
// collectives; nothing is issued from a goroutine. The error is not fed
// back (the papers keep none).

// int8Reduce is one fragment's int8 reduction.
type int8Reduce struct {
	g         pg.ProcessGroup
	a2a       pg.AllToAller
	n, chunk  int // values, values per chunk
	blocks, L int // scales per chunk, bytes per packed chunk
	send      []byte
	recv      []byte
	mine      []byte
	all       []byte
	phase     int // 0 idle, 1 the AllToAll in flight, 2 the AllGather
	work      pg.Work
}

func newInt8(g pg.ProcessGroup, n int) (*int8Reduce, error) {
	var a pg.AllToAller
	if !pg.As(g, &a) {
		return nil, fmt.Errorf("diloco: int8 pseudo-gradients need AllToAll (pg.AllToAller); the %s group has none",
			pg.BackendName(g))
	}
	N := g.Size()
	q := &int8Reduce{g: g, a2a: a, n: n, chunk: (n + N - 1) / N}
	q.blocks = (q.chunk + int8Block - 1) / int8Block
	q.L = 4*q.blocks + q.chunk
	q.send, q.recv, q.all = make([]byte, N*q.L), make([]byte, N*q.L), make([]byte, N*q.L)
	q.mine = make([]byte, q.L)
	return q, nil
}

// start quantizes x (n values) chunk by chunk and starts the AllToAll.
func (q *int8Reduce) start(ctx context.Context, x []float64) error {
	if q.phase != 0 {
		return errors.New("diloco: an int8 reduction started twice")
	}
	for j := range q.g.Size() {
		quantize(q.send[j*q.L:(j+1)*q.L], q.part(x, j), q.blocks)
	}
	q.work, q.phase = q.a2a.AllToAll(ctx, pg.Uint8s(q.recv), pg.Uint8s(q.send), nil, nil), 1
	return nil
}

// part is chunk j of x, shorter (or empty) at the end.
func (q *int8Reduce) part(x []float64, j int) []float64 {
	lo, hi := min(j*q.chunk, len(x)), min((j+1)*q.chunk, len(x))
	return x[lo:hi]
}

// middle waits for the AllToAll, sums this rank's chunk and starts the
// AllGather of it.
func (q *int8Reduce) middle(ctx context.Context) error {
	if q.phase != 1 {
		return nil
	}
	if err := q.wait(ctx); err != nil {
		return err
	}
	sum := make([]float64, q.chunk)
	piece := make([]float64, q.chunk)
	for r := range q.g.Size() {
		dequantize(piece, q.recv[r*q.L:(r+1)*q.L], q.blocks)
		for i, v := range piece {
			sum[i] += v
		}
	}
	quantize(q.mine, sum, q.blocks)
	q.work, q.phase = q.g.AllGather(ctx, pg.Uint8s(q.all), pg.Uint8s(q.mine)), 2
	return nil
}

// finish completes the reduction into out (n values).
func (q *int8Reduce) finish(ctx context.Context, out []float64) error {
	if err := q.middle(ctx); err != nil {
		return err
	}
	if q.phase != 2 {
		return errors.New("diloco: an int8 reduction finished before it started")
	}
	if err := q.wait(ctx); err != nil {
		return err
	}
	q.phase = 0
	piece := make([]float64, q.chunk)
	for j := range q.g.Size() {
		dequantize(piece, q.all[j*q.L:(j+1)*q.L], q.blocks)
		copy(q.part(out, j), piece)
	}
	return nil
}

func (q *int8Reduce) wait(ctx context.Context) error {
	w := q.work
	q.work = nil
	if err := w.Wait(ctx); err != nil {
		q.phase = 0
		return fmt.Errorf("averaging the int8 pseudo-gradients over %d ranks: %w", q.g.Size(), err)
	}
	return nil
}

// quantize packs x (at most len(dst)−4·blocks values, the rest zeros)
// into dst: blocks float32 scales, then one int8 per value.
func quantize(dst []byte, x []float64, blocks int) {
	clear(dst)
	vals := dst[4*blocks:]
	for b := range blocks {
		lo, hi := min(b*int8Block, len(x)), min((b+1)*int8Block, len(x))
		var peak float64
		for _, v := range x[lo:hi] {
			peak = max(peak, math.Abs(v))
		}
		scale := float32(peak / 127)
		putFloat32(dst[4*b:], scale)
		if scale == 0 {
			continue
		}
		for i := lo; i < hi; i++ {
			q := math.Round(x[i] / float64(scale))
			vals[i] = byte(int8(max(-127, min(127, q))))
		}
	}
}

// dequantize unpacks src into out (len(src)−4·blocks values).
func dequantize(out []float64, src []byte, blocks int) {
	vals := src[4*blocks:]
	for i := range out {
		out[i] = float64(int8(vals[i])) * float64(getFloat32(src[4*(i/int8Block):]))
	}
}

func putFloat32(b []byte, v float32) {
	u := math.Float32bits(v)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

func getFloat32(b []byte) float32 {
	return math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}
