package scalemodel

import "testing"

// dilocoProfile is one bucket of s bytes, ready when backward ends, so
// that DDP's allreduce is all exposed.
func dilocoProfile(s float64) Profile {
	return Profile{Forward: 0.01, Backward: 0.03, Other: 0.01, Buckets: []Bucket{{Ready: 0.03, Bytes: s}}}
}

// With H = 1 and one fragment, DiLoCo allreduces every parameter after
// every step, none of it overlapped: DDP's step with its communication
// all exposed, and DDP's bytes.
func TestDiLoCoH1IsExposedDDP(t *testing.T) {
	p := dilocoProfile(4e6)
	c := Cluster{Hosts: 2, RanksPerHost: 2, Inter: Link{alpha, beta}, Intra: Link{ai, bi}, SharedMemory: true}
	for _, a := range []Algorithm{Auto, Ring, Doubling, Hierarchical} {
		pr := PredictDiLoCo(p, c, a, DiLoCo{SyncEvery: 1})
		ddp := Predict(p, c, a, Hook{})
		near(t, a.String()+" step", pr.Step, ddp.Step)
		near(t, a.String()+" exposed", pr.Exposed, ddp.Exposed)
		near(t, a.String()+" bytes", pr.BytesSent, ddp.BytesSent)
		near(t, a.String()+" traffic", pr.Traffic.HostSent, pr.DDPTraffic.HostSent)
		near(t, a.String()+" speedup", pr.Speedup, 1)
		near(t, a.String()+" hidden", pr.Hidden, 0)
	}
}

// Bytes per step fall as 1/H, and the exposed time with them; fragments
// split the bytes, not add to them; quantisation scales them.
func TestDiLoCoBytesFallAsOneOverH(t *testing.T) {
	const s = 8e6
	c := flat(2)
	p := dilocoProfile(s)
	one := PredictDiLoCo(p, c, Ring, DiLoCo{SyncEvery: 1})
	for _, h := range []int{2, 20, 50, 100} {
		pr := PredictDiLoCo(p, c, Ring, DiLoCo{SyncEvery: h})
		near(t, "bytes", pr.BytesSent, s/float64(h))
		// Ring of 2 ranks: each sends 2(p−1)/p·S = S per allreduce.
		near(t, "rank traffic", pr.Traffic.RankSent, s/float64(h))
		near(t, "host traffic", pr.Traffic.HostSent, s/float64(h))
		near(t, "exposed", pr.Exposed, one.Exposed/float64(h))
		near(t, "step", pr.Step, p.Compute()+c.AllReduceTime(Ring, s)/float64(h))
		frag := PredictDiLoCo(p, c, Ring, DiLoCo{SyncEvery: h, Fragments: 2})
		near(t, "fragment bytes", frag.BytesSent, s/float64(h))
		near(t, "fragment sync", frag.Sync, c.AllReduceTime(Ring, s/2))
		q := PredictDiLoCo(p, c, Ring, DiLoCo{SyncEvery: h, QuantizeBytes: 2})
		near(t, "bf16 bytes", q.BytesSent, s/2/float64(h))
	}
	// 4 ranks on a flat ring: 2·3/4 of the bytes each.
	pr := PredictDiLoCo(p, flat(4), Ring, DiLoCo{SyncEvery: 10})
	near(t, "ring of 4", pr.Traffic.RankSent, 1.5*s/10)
}

// The delay hides up to τ inner steps' compute of a fragment's
// allreduce, and no more; and a link slower than the period can carry
// bounds the step from below.
func TestDiLoCoDelayHides(t *testing.T) {
	c := flat(2)
	const s = 1.25e7 // 0.1 s at 1 Gbit/s, plus 2α
	sync := c.AllReduceTime(Ring, s)
	p := dilocoProfile(s) // compute 50 ms
	cmp := p.Compute()
	for _, tc := range []struct {
		delay   int
		exposed float64 // per period of H steps
	}{{0, sync}, {1, sync - cmp}, {2, sync - 2*cmp}, {3, 0}, {5, 0}} {
		pr := PredictDiLoCo(p, c, Ring, DiLoCo{SyncEvery: 10, Delay: tc.delay})
		near(t, "step", pr.Step, cmp+tc.exposed/10)
		near(t, "hidden", pr.Hidden, 1-tc.exposed/sync)
	}
	// Two fragments of 0.05 s each with H = 2 and τ = 1: hidden behind
	// compute, but the link carries 0.1 s of every 0.1 s period: the
	// bound holds the step at (2 fragments × their sync) / 2.
	slow := dilocoProfile(4 * s)
	slow.Forward, slow.Backward, slow.Other = 0.001, 0.001, 0.001
	pr := PredictDiLoCo(slow, c, Ring, DiLoCo{SyncEvery: 2, Fragments: 2, Delay: 1})
	near(t, "link-bound step", pr.Step, c.AllReduceTime(Ring, 2*s))
	// One rank: nothing to send.
	near(t, "one rank", PredictDiLoCo(p, flat(1), Ring, DiLoCo{SyncEvery: 5}).Step, cmp)
}

func TestDiLoCoValidate(t *testing.T) {
	for _, d := range []DiLoCo{{}, {SyncEvery: 5, Delay: 5}, {SyncEvery: 5, Fragments: 6},
		{SyncEvery: 5, Delay: -1}, {SyncEvery: 5, QuantizeBytes: -2}} {
		if d.Validate() == nil {
			t.Errorf("%+v validated", d)
		}
	}
	if err := (DiLoCo{SyncEvery: 50, Fragments: 2, Delay: 1, QuantizeBytes: 2}).Validate(); err != nil {
		t.Error(err)
	}
}

// The traffic of the hierarchical allreduce: only the leaders cross, each
// host sending the whole buffer once on a 2-leader ring; a doubling
// round across hosts puts every rank of a host on its link.
func TestAllReduceTraffic(t *testing.T) {
	const s = 8 << 20
	c := Cluster{Hosts: 2, RanksPerHost: 4, Inter: Link{alpha, beta}, Intra: Link{ai, bi}}
	h := c.AllReduceTraffic(Hierarchical, s)
	near(t, "hierarchical host", h.HostSent, s)
	// Reduce: 3 ranks send S per host; broadcast: 3 sends; ring: 1 per host.
	near(t, "hierarchical rank", h.RankSent, (2*(3+3)*s+2*s)/8)
	near(t, "doubling host", c.AllReduceTraffic(Doubling, s).HostSent, 4*s)
	near(t, "ring host", c.AllReduceTraffic(Ring, s).HostSent, 2*7*s/8)
	near(t, "one rank", flat(1).AllReduceTraffic(Ring, s).RankSent, 0)
}
