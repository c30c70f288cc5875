package commhook

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/goddp/ddp/pg"
)

// PostLocalSGDOptions configure NewPostLocalSGD, after torch's
// PostLocalSGDState.
type PostLocalSGDOptions struct {
	// StartLocalSGDIter (start_localSGD_iter) is the number of iterations
	// that allreduce gradients over the whole group, as plain DDP, before
	// local SGD starts. It should equal the model averager's WarmupSteps.
	StartLocalSGDIter int
	// Subgroup is the group gradients are averaged in from then on. nil
	// means the ranks on this rank's host (torch: dist.new_subgroups(), the
	// intra-node group), found as HierarchicalOptions does: by Host label,
	// or by RanksPerHost below.
	Subgroup pg.ProcessGroup
	// Host and RanksPerHost lay out the hosts when Subgroup is nil; see
	// HierarchicalOptions. Empty Host means os.Hostname().
	Host         string
	RanksPerHost int
	// NoPostLocalGradientAllreduce turns off torch's
	// post_local_gradient_allreduce (default true): after
	// StartLocalSGDIter, gradients are not communicated at all, only the
	// model averager averages parameters.
	NoPostLocalGradientAllreduce bool
}

// PostLocalSGD is torch's post_localSGD_hook with its PostLocalSGDState:
// for the first StartLocalSGDIter iterations it averages each bucket over
// the whole group, as Allreduce does; after that over the subgroup only
// (by default the ranks on one host), or not at all. It is meant to run
// with a model averager (package averaging) that averages the parameters
// over the whole group every few steps after the optimizer step:
// post-local SGD (Lin et al., https://arxiv.org/abs/1808.07217).
//
// Its iteration count is its state: it counts an iteration when it
// reduces the iteration's last bucket, before the switch (as torch's
// maybe_increase_iter), and it is saved with checkpoints (Stateful).
type PostLocalSGD struct {
	opts     PostLocalSGDOptions
	subgroup pg.ProcessGroup
	owned    bool // the subgroup was made here, and Close closes it

	mu   sync.Mutex
	iter int
}

// NewPostLocalSGD returns the hook for rank g.Rank() of g, the group the
// reducer runs on. With a nil Subgroup it makes the intra-host subgroup
// now, which is collective over g: every rank calls it at the same point.
func NewPostLocalSGD(ctx context.Context, g pg.ProcessGroup, o PostLocalSGDOptions) (*PostLocalSGD, error) {
	if o.StartLocalSGDIter < 0 {
		return nil, fmt.Errorf("%w: post-local SGD's StartLocalSGDIter %d is negative", ErrInvalidConfig, o.StartLocalSGDIter)
	}
	if o.RanksPerHost < 0 {
		return nil, fmt.Errorf("%w: RanksPerHost %d is negative; use 0 to group ranks by host label", ErrInvalidConfig,
			o.RanksPerHost)
	}
	p := &PostLocalSGD{opts: o, subgroup: o.Subgroup}
	if p.subgroup != nil {
		return p, nil
	}
	var sp pg.Splitter
	if !pg.As(g, &sp) {
		return nil, fmt.Errorf("commhook: post-local SGD needs an intra-host subgroup, and a %s group cannot split (no "+
			"pg.Splitter); pass PostLocalSGDOptions.Subgroup", pg.BackendName(g))
	}
	h := HierarchicalOptions{Host: o.Host, RanksPerHost: o.RanksPerHost}
	if h.RanksPerHost == 0 && h.Host == "" {
		name, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf(
				"commhook: post-local SGD: no host label and os.Hostname failed (set PostLocalSGDOptions.Host or Subgroup): %w",
				err)
		}
		h.Host = name
	}
	layout, _, err := hostLayout(ctx, g, h)
	if err != nil {
		return nil, fmt.Errorf("commhook: post-local SGD: %w", err)
	}
	sub, err := sp.Split(ctx, layout[g.Rank()], g.Rank())
	if err != nil {
		return nil, fmt.Errorf("commhook: post-local SGD: making host %d's group: %w", layout[g.Rank()], err)
	}
	p.subgroup, p.owned = sub, true
	return p, nil
}

// Name is "post-localsgd".
func (*PostLocalSGD) Name() string { return "post-localsgd" }

// Subgroup is the group gradients are averaged in after the switch.
func (p *PostLocalSGD) Subgroup() pg.ProcessGroup { return p.subgroup }

// Iter is the number of iterations counted so far (torch's state.iter).
func (p *PostLocalSGD) Iter() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.iter
}

// Run averages b over g until StartLocalSGDIter iterations have been
// counted, then over the subgroup (or leaves it as it is).
func (p *PostLocalSGD) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	p.mu.Lock()
	global := p.iter < p.opts.StartLocalSGDIter
	if global && b.IsLast {
		p.iter++
	}
	p.mu.Unlock()
	switch {
	case global:
		return allreduceBySize(ctx, g, b)
	case p.opts.NoPostLocalGradientAllreduce:
		return pg.Completed(nil) // the bucket keeps this rank's own gradients
	}
	return allreduceBySize(ctx, p.subgroup, b)
}

// State is the iteration count.
func (p *PostLocalSGD) State() map[string][]float64 {
	return map[string][]float64{"iter": {float64(p.Iter())}}
}

// LoadState restores the iteration count.
func (p *PostLocalSGD) LoadState(s map[string][]float64) error {
	v, ok := s["iter"]
	if !ok || len(v) != 1 || v[0] < 0 || v[0] != float64(int(v[0])) {
		return errors.New("commhook: post-local SGD state needs one non-negative whole \"iter\"")
	}
	p.mu.Lock()
	p.iter = int(v[0])
	p.mu.Unlock()
	return nil
}

// Close closes the subgroup if NewPostLocalSGD made it.
func (p *PostLocalSGD) Close() error {
	if p.owned {
		return p.subgroup.Close()
	}
	return nil
}
