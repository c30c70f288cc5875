package reducer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/goddp/ddp/pg"
)

// ErrReplicasDiverged: the ranks' parameters are no longer identical, so
// data-parallel training has silently become something else.
var ErrReplicasDiverged = errors.New("reducer: the replicas' parameters differ across ranks")

// Note [replica check]
//
// DDP's promise is that every rank holds the same parameters. A bug, a
// rank-dependent graph, an optimizer stepping different lists, a NaN on
// one rank or a stray write breaks that silently. The check compares a
// 62-bit digest of each parameter across ranks with one allreduce MAX of
// 2·P int64 words: d_i and −d_i for each parameter i. Afterwards word 2i
// is the largest digest and −word 2i+1 the smallest; they are equal on
// every rank exactly when all ranks agree. Because it is a MAX of a few
// words, it can ride on an allreduce MAX that the step makes anyway
// (ddp-train's stop-signal check: ReplicaWords, then CheckReplicaWords).
// Only when a digest disagrees do the ranks, which all see it, gather
// every digest to name the ranks that differ. A digest is a multiply-xor
// over the parameter's bytes, about memory speed: one bit flipped in one
// element always changes it (each round is a bijection of the word).

const digestMask = 1<<62 - 1 // so that −d fits an int64 and never meets d

// digest is parameter t's 62-bit digest.
func digest(t pg.Tensor) int64 {
	const (
		m1 = 0x9e3779b97f4a7c15 // odd: multiplying by it is a bijection
		m2 = 0xc2b2ae3d27d4eb4f
	)
	b := t.Data
	h0, h1 := uint64(len(b))*m1, uint64(0x27d4eb2f165667c5)
	for len(b) >= 16 {
		h0 = (h0 ^ binary.LittleEndian.Uint64(b)) * m1
		h1 = (h1 ^ binary.LittleEndian.Uint64(b[8:])) * m2
		h0, h1 = bits.RotateLeft64(h0, 29), bits.RotateLeft64(h1, 31)
		b = b[16:]
	}
	for _, c := range b {
		h0 = (h0 ^ uint64(c)) * m1
	}
	h := h0 ^ bits.RotateLeft64(h1, 17)
	h ^= h >> 33
	h *= m2
	h ^= h >> 29
	return int64(h & digestMask)
}

// ReplicaWords appends the replica check's words for values (a digest d
// and −d per parameter) to dst, for an allreduce MAX; see Note [replica
// check]. Host tensors only.
func ReplicaWords(dst []int64, values []pg.Tensor) []int64 {
	for _, v := range values {
		d := digest(v)
		dst = append(dst, d, -d)
	}
	return dst
}

// VerifyReplicas checks that every rank holds the same values: one small
// allreduce, and only on a mismatch an allgather to name the ranks. It
// returns ErrReplicasDiverged on every rank, naming the first parameter
// that differs and which ranks hold what, and the reducer fails. It is
// collective: every rank calls it at the same point, with its parameters
// in the reducer's order. While some rank has joined (Join), replicas
// differ by design until Finish, so it does nothing.
func (r *Reducer) VerifyReplicas(ctx context.Context, values []pg.Tensor) error {
	if err := r.checkValues("VerifyReplicas", values); err != nil {
		return err
	}
	if r.shadowed() {
		return nil
	}
	words := ReplicaWords(make([]int64, 0, 2*len(values)), values)
	if err := r.g.AllReduce(ctx, pg.Int64s(words), pg.Op(pg.Max)).Wait(ctx); err != nil {
		return fmt.Errorf("reducer: comparing the replicas' parameters: %w", err)
	}
	return r.CheckReplicaWords(ctx, words, values)
}

// CheckReplicaWords finishes a replica check whose words (ReplicaWords of
// values) went through an allreduce MAX, possibly inside a larger one. If
// some parameter's digest differs across ranks, every rank sees it, and
// all gather their digests (collective) to return ErrReplicasDiverged
// naming the parameter and the ranks.
func (r *Reducer) CheckReplicaWords(ctx context.Context, words []int64, values []pg.Tensor) error {
	if len(words) != 2*len(r.params) || len(values) != len(r.params) {
		return fmt.Errorf("reducer: CheckReplicaWords: %d words and %d values for %d parameters; want 2 words per parameter",
			len(words), len(values), len(r.params))
	}
	first := -1
	for i := range r.params {
		if words[2*i] != -words[2*i+1] {
			first = i
			break
		}
	}
	if first < 0 {
		return nil
	}
	n := r.g.Size()
	mine := make([]int64, len(values))
	for i, v := range values {
		mine[i] = digest(v)
	}
	all := make([]int64, n*len(values))
	if err := r.g.AllGather(ctx, pg.Int64s(all), pg.Int64s(mine)).Wait(ctx); err != nil {
		return r.fatal(fmt.Errorf("%w: parameter %d (%s) differs, and gathering the digests to name the ranks failed: %v",
			ErrReplicasDiverged, first, r.params[first].Name, err))
	}
	groups := map[int64][]int{}
	var order []int64
	for rank := range n {
		d := all[rank*len(values)+first]
		if _, ok := groups[d]; !ok {
			order = append(order, d)
		}
		groups[d] = append(groups[d], rank)
	}
	parts := make([]string, len(order))
	for k, d := range order {
		parts[k] = fmt.Sprintf("ranks %s hold %015x", rankList(groups[d]), d)
	}
	return r.fatal(fmt.Errorf("%w: parameter %d (%s) is the first that differs (%s); every rank stops, since training "+
		"on would average gradients of different models. Look for rank-dependent code between steps (the optimizer must "+
		"step every parameter on every rank: ddp.DDP.StepTensors or ValueGrads), a NaN on one rank, or writes to "+
		"parameters outside the optimizer",
		ErrReplicasDiverged, first, r.params[first].Name, strings.Join(parts, "; ")))
}

func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ",")
}

// shadowed reports whether some rank has joined (Join) while this one
// trains: then replicas differ by design until Finish.
func (r *Reducer) shadowed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.status().othersJoined
}
