package scalemodel

import (
	"math"
	"testing"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*max(1, math.Abs(want)) {
		t.Errorf("%s = %.12g, want %.12g", what, got, want)
	}
}

const (
	alpha = 50e-6
	beta  = 1.25e8 // 1 Gbit/s
	ai    = 2e-6
	bi    = 5e9
)

func flat(p int) Cluster {
	return Cluster{Hosts: p, RanksPerHost: 1, Inter: Link{alpha, beta}, Intra: Link{ai, bi}}
}

// The textbook α–β costs, with one rank per host.
func TestClosedForms(t *testing.T) {
	const s = 8 << 20
	for _, p := range []int{2, 3, 4, 8, 16, 1024} {
		c := flat(p)
		fp := float64(p)
		near(t, "ring", c.AllReduceTime(Ring, s), 2*(fp-1)*alpha+2*(fp-1)/fp*s/beta)
		lg := math.Floor(math.Log2(fp))
		want := lg * (alpha + s/beta)
		if p&(p-1) != 0 {
			want += 2 * (alpha + s/beta) // fold in, hand back
		}
		near(t, "doubling", c.AllReduceTime(Doubling, s), want)
		// Auto and Hierarchical are the ring for big buffers, with one rank per host.
		near(t, "auto", c.AllReduceTime(Auto, s), c.AllReduceTime(Ring, s))
		near(t, "hierarchical", c.AllReduceTime(Hierarchical, s), c.AllReduceTime(Ring, s))
		near(t, "auto small", c.AllReduceTime(Auto, 1024), c.AllReduceTime(Doubling, 1024))
	}
	near(t, "one rank", flat(1).AllReduceTime(Ring, s), 0)
}

// Several ranks per host: the flat ring's bottleneck is the one edge per
// host that crosses; doubling's cross-host rounds put every rank of a
// host on its link at once; hierarchical sends once per host.
func TestRanksPerHost(t *testing.T) {
	const s = 8 << 20
	c := Cluster{Hosts: 2, RanksPerHost: 4, Inter: Link{alpha, beta}, Intra: Link{ai, bi}}
	near(t, "ring", c.AllReduceTime(Ring, s), 14*(alpha+s/8/beta))
	// Rounds 1 and 2 stay in a host; round 4 crosses with 4 flows per host.
	near(t, "doubling", c.AllReduceTime(Doubling, s), 2*(ai+s/bi)+alpha+4*s/beta)
	// Binomial reduce and broadcast of 2 rounds each, then a 2-leader ring.
	near(t, "hierarchical", c.AllReduceTime(Hierarchical, s), 4*(ai+s/bi)+2*(alpha+s/2/beta))
	near(t, "auto, no shm", c.AllReduceTime(Auto, s), c.AllReduceTime(Ring, s))
	c.SharedMemory = true
	near(t, "auto, shm", c.AllReduceTime(Auto, s), c.AllReduceTime(Hierarchical, s))
}

func TestHookCollectives(t *testing.T) {
	b := Bucket{Bytes: 4 * (512*512 + 512 + 512*4),
		Params: []Param{{Rows: 512, Cols: 512}, {Rows: 512}, {Rows: 512, Cols: 4}}}
	eq := func(what string, got []float64, want ...float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		for i := range got {
			near(t, what, got[i], want[i])
		}
	}
	eq("allreduce", Hook{Kind: Allreduce}.Collectives(b), b.Bytes)
	eq("fp16", Hook{Kind: FP16}.Collectives(b), b.Bytes/2)
	// 512×4 is not worth compressing at rank 1: (512+4)·1·2 ≥ 2048 is false,
	// so it is compressed; at rank 4, (516)·4·2 = 4128 ≥ 2048 sends it whole.
	eq("powersgd:1", Hook{Kind: PowerSGD, Rank: 1}.Collectives(b), 4*512, 4*(512+512), 4*(512+4))
	eq("powersgd:4", Hook{Kind: PowerSGD, Rank: 4}.Collectives(b), 4*(512+512*4), 4*512*4, 4*512*4)
	eq("powersgd without shapes", Hook{Kind: PowerSGD, Rank: 1}.Collectives(Bucket{Bytes: 100}), 100)
	eq("fp16 of fp16", Hook{Kind: FP16}.Collectives(Bucket{Bytes: 100, ElemBytes: 2}), 100)
}

// One bucket ready at the end of backward is all exposed; a bucket ready
// early enough is all hidden; a later bucket queues behind an earlier one.
func TestPredictOverlap(t *testing.T) {
	c := flat(2)
	s := 1.25e7 // 0.1 s at 1 Gbit/s for 2 ranks (2(p-1)/p = 1), plus 2α
	ct := 2*alpha + s/beta
	p := Profile{Forward: 0.05, Backward: 0.3, Other: 0.01, Buckets: []Bucket{{Ready: 0.3, Bytes: s}}}
	pr := Predict(p, c, Ring, Hook{})
	near(t, "step", pr.Step, 0.36+ct)
	near(t, "hidden", pr.Hidden, 0)
	p.Buckets = []Bucket{{Ready: 0.1, Bytes: s}, {Ready: 0.15, Bytes: s}}
	pr = Predict(p, c, Ring, Hook{})
	// The second starts at 0.1+ct, ends at 0.1+2ct = 0.3004 > 0.3.
	exposed := 0.1 + 2*ct - 0.3
	near(t, "step", pr.Step, 0.36+exposed)
	near(t, "hidden", pr.Hidden, 1-exposed/(2*ct))
	near(t, "efficiency", pr.Efficiency, 0.36/(0.36+exposed))
	near(t, "one rank", Predict(p, flat(1), Ring, Hook{}).Step, 0.36)
}

func TestParse(t *testing.T) {
	for _, s := range []string{"allreduce", "fp16", "bf16", "powersgd:1", "powersgd:4"} {
		h, err := ParseHook(s)
		if err != nil || h.String() != s {
			t.Errorf("ParseHook(%q) = %v, %v", s, h, err)
		}
	}
	for _, s := range []string{"powersgd:0", "fp16:2", "x"} {
		if _, err := ParseHook(s); err == nil {
			t.Errorf("ParseHook(%q): no error", s)
		}
	}
	for _, a := range []Algorithm{Auto, Ring, Doubling, Hierarchical} {
		if b, err := ParseAlgorithm(a.String()); err != nil || b != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, b, err)
		}
	}
	if err := (Cluster{Hosts: 2, RanksPerHost: 1}).Validate(); err == nil {
		t.Error("a cluster without bandwidth validated")
	}
}

func TestSyntheticProfile(t *testing.T) {
	p, err := SyntheticProfile(Synthetic{Params: 10 << 20, Forward: 0.1, Backward: 0.2, Rows: 512})
	if err != nil {
		t.Fatal(err)
	}
	// 40 MiB: a 1 MiB first bucket, a 25 MiB one, and 14 MiB.
	want := []float64{1 << 20, 25 << 20, 14 << 20}
	if len(p.Buckets) != len(want) {
		t.Fatalf("%d buckets, want %d", len(p.Buckets), len(want))
	}
	for i, b := range p.Buckets {
		near(t, "bytes", b.Bytes, want[i])
		var elems int
		for _, pr := range b.Params {
			elems += pr.Rows * max(pr.Cols, 1)
		}
		near(t, "elements", float64(elems), want[i]/4)
	}
	near(t, "last ready", p.Buckets[2].Ready, 0.2)
	near(t, "first ready", p.Buckets[0].Ready, 0.2/40)
	if _, err := SyntheticProfile(Synthetic{}); err == nil {
		t.Error("no error for no parameters")
	}
}
