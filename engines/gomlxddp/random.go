package gomlxddp

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Note [per-rank random streams]
//
// GoMLX's random ops (dropout, ctx.RandomUniform, ...) draw from one
// variable of the context, the random state #rngState in the root scope,
// which each gradient graph reads and writes back advanced. The set-up
// copies it from rank 0 to every rank with the other variables (Note
// [rank 0's variables]), and every rank runs the same program, so left
// alone every rank would draw the same numbers: the same dropout masks,
// applied to different rows. Data-parallel training wants each rank to
// draw as its own process would.
//
// So the variable carries a shared state S, equal on every rank, and
// each gradient graph (TrainStep's and TrainStepNoSync's alike) runs on a
// state of its rank's own. Before the graph runs, the Trainer reads S and
// sets the variable to rankState(S, Options.Seed, rank); after it, to
// nextState(S). Both are hashes of their arguments (splitmix64's
// mixer), so the streams of different ranks, different runs of the graph
// and different seeds are unrelated, and S after n runs is a function of
// S at the start and n alone, the same on every rank. The cost is one
// read and two writes of a 24-byte variable per run, no recompilation.
// (The hash passes through a 64-bit accumulator, so states repeat only
// after some 2^32 runs.)
//
// Why S and not a step counter (GoMLX's global_step) with a seed: the
// counter would have to count every run of the gradient graph, no-sync
// micro-steps and steps whose update was skipped for a non-finite
// gradient included, which global_step does not (it counts applied
// updates, and only for optimizers that keep one), and it would have to
// be restored by a checkpoint. #rngState is both already: GoMLX
// checkpoints save it, the set-up copies rank 0's (loaded) value to every
// rank, and what rank 0 saves after a step is S, not its own rank's
// state. So a job resumed from a checkpoint draws exactly what the job
// that never stopped drew, and the base of the streams is GoMLX's own:
// rank 0's initial random state, fixed by mlctx.ParamInitialSeed (or a
// checkpoint), which already fixes the initial values. Options.Seed is
// mixed in besides, to vary the masks without varying the initial values;
// 0 is a seed like any other. A run is reproducible when its initial
// values are: with ParamInitialSeed set on rank 0, or a checkpoint.
//
// Random ops of the optimizer's graph, which runs after the variable is
// back to the shared state, and of graphs the Trainer does not run (an
// evaluation graph of the user's) draw from S itself, as before; they
// advance it as usual, and the next gradient graph derives its state from
// the advanced S. Options.SameRandomAcrossRanks leaves the
// variable alone, as before: every rank draws the same numbers, which a
// model whose random choices must agree across replicas needs, and with
// one rank training then draws what GoMLX's own Trainer draws.

// rngStream sets the context's random state around each run of the
// gradient graph: see Note [per-rank random streams].
type rngStream struct {
	v    *mlctx.Variable // #rngState
	seed uint64          // Options.Seed
	rank uint64
}

// newRNGStream returns the stream of rank, or nil when o asks for the
// same random numbers on every rank. mctx must hold its random state.
func newRNGStream(mctx *mlctx.Context, o Options, rank int) *rngStream {
	if o.SameRandomAcrossRanks {
		return nil
	}
	v := mctx.GetVariableByScopeAndName(mlctx.RootScope, mlctx.RNGStateVariableName)
	return &rngStream{v: v, seed: uint64(o.Seed), rank: uint64(rank)}
}

// begin sets the variable to this rank's state for the next run of the
// gradient graph and returns the shared state that follows it.
func (s *rngStream) begin() ([]uint64, error) {
	if s == nil {
		return nil, nil
	}
	val, err := s.v.Value()
	if err != nil {
		return nil, fmt.Errorf("gomlxddp: the random state: %w", err)
	}
	if val.DType() != dtypes.Uint64 {
		return nil, fmt.Errorf("gomlxddp: the random state is %s, want uint64", val.Shape())
	}
	shared, err := tensors.CopyFlatData[uint64](val)
	if err != nil {
		return nil, fmt.Errorf("gomlxddp: the random state: %w", err)
	}
	if err := s.set(rankState(shared, s.seed, s.rank)); err != nil {
		return nil, err
	}
	return nextState(shared), nil
}

// end sets the variable to next, the shared state begin returned, after
// the gradient graph has run.
func (s *rngStream) end(next []uint64) error {
	if s == nil {
		return nil
	}
	return s.set(next)
}

func (s *rngStream) set(words []uint64) error {
	if err := s.v.SetValue(tensors.FromFlatDataAndDimensions(words, len(words))); err != nil {
		return fmt.Errorf("gomlxddp: setting the random state: %w", err)
	}
	return nil
}

// Domain tags, so that a rank's state and the next shared state are
// different hashes of the same S.
const (
	tagNext uint64 = iota + 1
	tagRank
)

// rankState is the state a rank's gradient graph runs on, from shared
// state s.
func rankState(s []uint64, seed, rank uint64) []uint64 {
	return hashState(len(s), append(append([]uint64{tagRank}, s...), seed, rank))
}

// nextState is the shared state after s.
func nextState(s []uint64) []uint64 {
	return hashState(len(s), append([]uint64{tagNext}, s...))
}

// hashState hashes words into n words: each word is absorbed into a
// 64-bit accumulator through splitmix64's mixer (a bijection with good
// avalanche), and the output words are a splitmix64 sequence seeded with
// the accumulator. Not cryptographic; it only has to make related inputs
// (neighbouring ranks, successive states) give unrelated outputs.
func hashState(n int, words []uint64) []uint64 {
	const golden = 0x9e3779b97f4a7c15
	h := uint64(golden)
	for _, w := range words {
		h = mix64(h^w) + golden
	}
	out := make([]uint64, n)
	for i := range out {
		h += golden
		out[i] = mix64(h)
	}
	return out
}

// mix64 is splitmix64's output function.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
