package scalemodel

import (
	"errors"
	"fmt"
)

// DiLoCo is how DiLoCo (package diloco; ddp-train --diloco-sync-every)
// communicates: no gradient communication in inner steps, and every
// SyncEvery inner steps, for each of Fragments fragments at staggered
// steps, one allreduce of the fragment's pseudo-gradients, which may
// overlap the next Delay inner steps.
type DiLoCo struct {
	SyncEvery int // H: inner steps between a fragment's synchronisations, at least 1
	Fragments int // F: fragments, synchronised at staggered steps; 0 means 1
	Delay     int // τ: inner steps a fragment's reduction overlaps before it is applied, 0 ≤ τ < H
	// QuantizeBytes is the bytes per element on the wire (2 for fp16 or
	// bf16); 0 means the parameters' own.
	QuantizeBytes float64
}

// Validate says what is wrong with d, or nil.
func (d DiLoCo) Validate() error {
	switch {
	case d.SyncEvery < 1:
		return fmt.Errorf("model: DiLoCo's SyncEvery is %d; want at least 1", d.SyncEvery)
	case d.Fragments < 0 || d.Fragments > d.SyncEvery:
		return fmt.Errorf("model: DiLoCo's Fragments is %d; want 1 to SyncEvery (%d)", d.Fragments, d.SyncEvery)
	case d.Delay < 0 || d.Delay >= d.SyncEvery:
		return fmt.Errorf("model: DiLoCo's Delay is %d; want 0 to SyncEvery−1 (%d)", d.Delay, d.SyncEvery-1)
	case d.QuantizeBytes < 0:
		return errors.New("model: DiLoCo's QuantizeBytes must be ≥ 0")
	}
	return nil
}

func (d DiLoCo) fragments() int { return max(d.Fragments, 1) }

// DiLoCoPrediction is the model's answer for DiLoCo on one cluster and
// algorithm, per optimizer (inner) step, averaged over the H steps of a
// period, against DDP's Predict with the plain allreduce hook.
type DiLoCoPrediction struct {
	Step    float64 // mean seconds per optimizer step
	Compute float64 // the compute-only step, Profile.Compute
	// Sync is one fragment's allreduce, in seconds; Exposed its share a
	// step waits for, per optimizer step on average.
	Sync, Exposed float64
	// Hidden is the share of the communication overlapped by the Delay
	// inner steps, in [0, 1].
	Hidden float64
	// BytesSent is the pseudo-gradient bytes a rank hands to allreduces
	// per optimizer step (ddp-train's diloco_bytes_sent over the steps).
	BytesSent float64
	// Traffic is what those allreduces put on the links per optimizer
	// step (Cluster.AllReduceTraffic).
	Traffic Traffic
	DDP     Prediction // Predict with Hook{Kind: Allreduce}
	// DDPTraffic is DDP's Traffic per step, its buckets' allreduces.
	DDPTraffic Traffic
	Speedup    float64 // DDP.Step / Step
}

// PredictDiLoCo predicts DiLoCo's step. An inner step is p's compute
// alone (the reducer's noop hook sends nothing). Every H steps each of the
// F fragments, 1/F of the parameters (diloco splits them into runs of
// about equal size), is allreduced, in QuantizeBytes per element; that
// allreduce, of time s, overlaps the next τ inner steps, whose compute C
// hides up to τ·C of it, so a period of H steps takes
//
//	max(H·C + F·max(s − τ·C, 0), F·s)
//
// (the second term: collectives run one at a time, so the link carries at
// most one fragment at once). The outer optimizer's own compute, the
// additions of received data and ddp-train's per-step stop-check
// allreduce are not modelled (docs/scaling.md, "DiLoCo").
func PredictDiLoCo(p Profile, c Cluster, a Algorithm, d DiLoCo) DiLoCoPrediction {
	h, f := float64(d.SyncEvery), d.fragments()
	var elems, bytes float64
	for _, b := range p.Buckets {
		elems += b.Bytes / b.elemBytes()
		bytes += b.Bytes
	}
	wire := bytes / float64(f)
	if d.QuantizeBytes > 0 {
		wire = elems * d.QuantizeBytes / float64(f)
	}
	cmp := p.Compute()
	pr := DiLoCoPrediction{Compute: cmp, Hidden: 1,
		DDP: Predict(p, c, a, Hook{Kind: Allreduce}), DDPTraffic: ddpTraffic(p, c, a)}
	if c.Ranks() > 1 {
		pr.Sync = c.AllReduceTime(a, wire)
		tr := c.AllReduceTraffic(a, wire)
		pr.BytesSent = float64(f) * wire / h
		pr.Traffic = Traffic{RankSent: float64(f) * tr.RankSent / h, HostSent: float64(f) * tr.HostSent / h}
	}
	exposed := float64(f) * max(pr.Sync-float64(d.Delay)*cmp, 0)
	period := max(h*cmp+exposed, float64(f)*pr.Sync)
	pr.Step = period / h
	pr.Exposed = max(pr.Step-cmp, 0)
	if comm := float64(f) * pr.Sync; comm > 0 {
		pr.Hidden = min(max(1-(period-h*cmp)/comm, 0), 1) // clamped: no −0 from rounding
	}
	if pr.Step > 0 {
		pr.Speedup = pr.DDP.Step / pr.Step
	}
	return pr
}

// ddpTraffic is what DDP's buckets put on the links per step, with the
// plain allreduce hook.
func ddpTraffic(p Profile, c Cluster, a Algorithm) Traffic {
	var t Traffic
	for _, b := range p.Buckets {
		tr := c.AllReduceTraffic(a, b.Bytes)
		t.RankSent += tr.RankSent
		t.HostSent += tr.HostSent
	}
	return t
}
