package desync

import (
	"context"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
)

// DefaultProbeTimeout bounds a diagnosis's network probes when Options
// sets none: a host on a working network answers a dial in well under a
// millisecond, and a SYN lost once is resent after a second.
const DefaultProbeTimeout = time.Second

// maxProbes bounds how many ranks one diagnosis probes at once.
const maxProbes = 64

// probe asks the wrapped group, when it can (pg.PeerProber), what the
// network says of the ranks this diagnosis did not hear from: the silent
// ones, or every other rank when the store did not answer (pg's Note
// [network or process]). It records each result in se.Progress and the
// ranks whose host did not answer in se.Unreachable. Probes run at once,
// bounded by Options.ProbeTimeout and by Close.
func (g *Group) probe(se *pg.StallError) {
	var p pg.PeerProber
	if !pg.As(g.inner, &p) {
		return
	}
	targets := se.Silent
	if se.StoreErr != nil {
		targets = nil
		for r := range g.size {
			if r != g.rank {
				targets = append(targets, r)
			}
		}
	}
	if len(targets) > maxProbes {
		targets = targets[:maxProbes]
	}
	ctx, cancel := context.WithTimeout(g.life, g.opts.ProbeTimeout)
	defer cancel()
	got := make([]pg.Probe, len(targets))
	var wg sync.WaitGroup
	for i, r := range targets {
		wg.Go(func() { got[i] = p.ProbePeer(ctx, r) })
	}
	wg.Wait()
	for i, r := range targets {
		se.Progress[r].Reach, se.Progress[r].Addr = got[i].Reach, got[i].Addr
		if got[i].Reach == pg.ReachNoHost {
			se.Unreachable = append(se.Unreachable, r)
		}
	}
}
