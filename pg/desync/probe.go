package desync

import (
	"context"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// DefaultProbeTimeout bounds a diagnosis's network probes when Options
// sets none: a host on a working network answers a dial in well under a
// millisecond, and a SYN lost once is resent after a second.
const DefaultProbeTimeout = time.Second

// maxProbes bounds how many ranks one diagnosis probes.
const maxProbes = 64

// probing is a diagnosis's network probes (pg's Note [network or
// process]): what the wrapped group's backend.PeerProber says of the ranks
// the diagnosis does not hear from. In a group of up to maxProbes+1
// ranks every other rank is probed as the diagnosis starts, alongside
// the wait for their progress, so the probes add no time; a rank that
// stays silent and whose host answered is probed again once the wait is
// over (answeredEarly). In a larger group, only the silent ranks are
// probed once that wait is over (or, when the store did not answer, the
// first maxProbes other ranks).
type probing struct {
	g    *Group
	p    backend.PeerProber
	got  []backend.Probe // by rank
	done chan struct{}   // closed once the early probes are in; nil: none were started
}

// startProbes starts the early probes; nil when the wrapped group
// cannot probe.
func (g *Group) startProbes() *probing {
	pr := &probing{g: g, got: make([]backend.Probe, g.size)}
	if !pg.As(g.inner, &pr.p) {
		return nil
	}
	if g.size-1 <= maxProbes && !g.opts.lateProbes {
		pr.done = make(chan struct{})
		go func() {
			defer close(pr.done)
			pr.run(pr.others())
		}()
	}
	return pr
}

// others are every rank but this one, at most maxProbes of them.
func (pr *probing) others() []int {
	var out []int
	for r := range pr.g.size {
		if r != pr.g.rank && len(out) < maxProbes {
			out = append(out, r)
		}
	}
	return out
}

// run probes ranks at once, bounded by Options.ProbeTimeout and Close.
func (pr *probing) run(ranks []int) {
	ctx, cancel := context.WithTimeout(pr.g.life, pr.g.opts.ProbeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { pr.got[r] = pr.p.ProbePeer(ctx, r) })
	}
	wg.Wait()
}

// answeredEarly are the targets whose host answered the early probe for
// their process: silent through the whole wait, they are probed again
// once it is over, since a process that was still dying as the diagnosis
// began (its peer on the same host killed a moment before it) has gone
// since, and "gone" is then the truth, not "stopped or busy".
func (pr *probing) answeredEarly(targets []int) []int {
	var out []int
	for _, r := range targets {
		if pr.got[r].Reach == pg.ReachAnswers && len(out) < maxProbes {
			out = append(out, r)
		}
	}
	return out
}

// apply waits for the probes and records, in se.Progress, what they
// found of the silent ranks (of every rank when the store did not
// answer), and in se.Unreachable the ranks whose host did not answer.
func (pr *probing) apply(se *pg.StallError) {
	if pr == nil {
		return
	}
	targets := se.Silent
	if se.StoreErr != nil {
		targets = pr.others()
	}
	if pr.done != nil {
		<-pr.done
		pr.run(pr.answeredEarly(targets)) // what counts is how they are now
	} else {
		pr.run(targets[:min(len(targets), maxProbes)])
	}
	for _, r := range targets {
		p := pr.got[r]
		se.Progress[r].Reach, se.Progress[r].Addr = p.Reach, p.Addr
		if p.Reach == pg.ReachNoHost {
			se.Unreachable = append(se.Unreachable, r)
		}
	}
}
