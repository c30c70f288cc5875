// Package gomlxddp trains GoMLX models (github.com/gomlx/gomlx)
// data-parallel across processes and hosts with goddp's process groups
// and reducer: PyTorch DDP for GoMLX. GoMLX itself distributes a model
// over the devices of one process (SPMD, DistributedTrainStep); this
// package adds what it lacks, training over several processes.
//
//	group, err := dist.InitProcessGroup(ctx, dist.Options{}) // or any pg.ProcessGroup
//	backend, err := simplego.New("ops_sequential")             // or any GoMLX backend (docs/gomlx.md)
//	mctx := mlctx.New()
//	tr, err := gomlxddp.New(backend, mctx, group, modelFn, losses.MeanSquaredError,
//		optimizers.Adam().Done(), gomlxddp.Options{})
//	defer tr.Close()
//	for each batch {
//		loss, err := tr.TrainStep(ctx, []*tensors.Tensor{x}, []*tensors.Tensor{y}) // this rank's shard
//	}
//	checkpoints.Build(mctx).Dir(dir).Done() ... Save() // rank 0, as without DDP
//
// modelFn and the loss are GoMLX's own train.ModelFn and train.LossFn,
// the optimizer one of GoMLX's (anything that implements
// train.OptimizeWithGradients: SGD, Adam, AdamW, Adamax); the model's
// variables live in the GoMLX context as usual, so GoMLX checkpoints save
// and load them.
//
// # The integration chosen
//
// Each step runs two compiled GoMLX graphs (Note [two graphs per step]):
// the first computes the loss and every trainable variable's gradient and
// returns them; the gradients go through goddp's reducer (size-capped
// buckets, rebuilt in gradient order after the first step, the comm hook
// of Options.Reducer.Hook: allreduce, fp16/bf16 compression, PowerSGD,
// hierarchical, a user's own) and come back averaged over the ranks; the
// second graph feeds them to the optimizer's UpdateGraphWithGradients,
// exactly as GoMLX's own gradient accumulation does. Before the first
// step every variable of the context (model, optimizer state, random
// state; any dtype) is copied from rank 0 to every rank (Note [rank 0's
// variables]), so ranks started from different seeds, or with a
// checkpoint loaded on rank 0 only, agree; after it every rank applies the
// same averages with the same program, so the replicas stay bitwise
// identical (VerifyReplicas and Options.Reducer.CheckReplicasEvery check
// it). Random ops (dropout) in the gradient graph do not draw from that
// shared random state but from one of each rank's own, derived from it,
// the rank and Options.Seed, and new at every step: each rank draws its
// own masks, reproducibly and across checkpoint resumes (Note [per-rank
// random streams]; Options.SameRandomAcrossRanks keeps the shared one).
//
// What it costs: GoMLX runs a graph as one compiled program, so the
// gradients exist only when the whole backward pass has finished. The
// buckets are filled and launched back to back after it, so communication
// overlaps only the copying of the later buckets, not backward itself,
// and each gradient is copied out of GoMLX and back in once per step
// (with Options.Reducer.GradientAsBucketView straight into and out of its
// bucket; otherwise through a buffer of its own, two copies more). The
// optimizer runs as a second, small program.
//
// The alternative, a backend collective (a GoMLX backend whose AllReduce
// op crosses processes through a pg.ProcessGroup, so that GoMLX's own
// DistributedTrainStep spans hosts), would overlap communication with
// backward where the backend schedules the op early, and keep the step in
// one program, but it gives up goddp's buckets and comm hooks (GoMLX's
// AllReduce takes a reduction type, not a hook), needs an AllReduce op
// that calls a Go process group from inside a running program (simplego,
// the pure-Go backend, implements no collective op at all in v0.26.0, and
// XLA's runs in XLA's runtime across the devices of one process), and ties
// the package to GoMLX's experimental distributed API. docs/gomlx.md weighs
// both.
//
// # What else works, and what not yet
//
// TrainStepNoSync is DDP's no_sync (gradient accumulation without
// communication); NewJoin is torch's Join, for uneven inputs. Per-step update functions the model registers with
// train.AddPerStepUpdateGraphFn run after the update, in the second
// graph. Non-trainable variables the model changes (batch-normalisation
// statistics) stay each rank's own unless Options.BroadcastBuffers is
// set. Options.Reducer.FindUnusedParameters (unneeded: a variable the
// loss does not reach is not a parameter here) and MixedPrecision are
// refused; GoMLX's metrics and train.Loop are not driven.
package gomlxddp
