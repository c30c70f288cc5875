package main

import (
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/sampler"
)

// feeder turns a micro-batch number into that micro-batch's data,
// following DistributedSampler: micro-batch m is batch m mod S of epoch
// m / S, S being the batches per epoch. The data order therefore depends
// only on m, which is what makes a resumed run equal an uninterrupted one.
type feeder struct {
	ds      *dataset.Dataset
	smp     *sampler.Sampler
	batch   int
	perEp   int
	epoch   int
	batches [][]int
	x       []float64
	y       []int
}

func newFeeder(ds *dataset.Dataset, smp *sampler.Sampler, batch int) *feeder {
	return &feeder{ds: ds, smp: smp, batch: batch, perEp: sampler.StepsPerEpoch(smp.NumSamples(), batch), epoch: -1,
		x: make([]float64, batch*ds.D), y: make([]int, batch)}
}

// load feeds micro-batch m to the session's net and returns its labels.
func (f *feeder) load(s *session, m int) ([]int, error) {
	x, y := f.gather(m)
	return y, s.net.Feed(s.spec, x, y)
}

// gather returns micro-batch m's features (rows of ds.D) and labels, in
// the feeder's buffers: valid until the next call.
func (f *feeder) gather(m int) ([]float64, []int) {
	if ep := m / f.perEp; ep != f.epoch {
		f.epoch, f.batches = ep, sampler.Batches(f.smp.Indices(ep), f.batch)
	}
	idx := f.batches[m%f.perEp]
	x, y := f.x[:len(idx)*f.ds.D], f.y[:len(idx)]
	f.ds.Gather(idx, x, y)
	return x, y
}
