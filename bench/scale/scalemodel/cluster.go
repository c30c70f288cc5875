package scalemodel

import (
	"errors"
	"fmt"
	"math"
)

// Link is one kind of link: its one-way latency per message and its
// bandwidth in each direction.
type Link struct {
	Latency   float64 // seconds
	Bandwidth float64 // bytes per second, each direction; must be positive
}

// Cluster is where the job runs: Hosts hosts of RanksPerHost ranks each,
// ranks numbered host by host (rank r on host r/RanksPerHost), as
// launchers place them. Inter is a host's link to the network (a
// full-bisection network: only a host's own link limits it); Intra is a
// rank's path to another rank of its host.
type Cluster struct {
	Hosts        int
	RanksPerHost int
	Inter        Link
	Intra        Link
	// SharedMemory: pg/tcp's shared-memory transport is on, so that Auto
	// is hierarchical on a group that spans several hosts with several
	// ranks each (pg/tcp's allReduce). ddp-train's --shm.
	SharedMemory bool
}

// Ranks is the world size.
func (c Cluster) Ranks() int { return c.Hosts * c.RanksPerHost }

// Validate says what is wrong with c, or nil.
func (c Cluster) Validate() error {
	switch {
	case c.Hosts < 1 || c.RanksPerHost < 1:
		return fmt.Errorf("model: %d hosts of %d ranks: want at least one of each", c.Hosts, c.RanksPerHost)
	case c.Hosts > 1 && !(c.Inter.Bandwidth > 0):
		return errors.New("model: the inter-host link needs a positive bandwidth")
	case c.RanksPerHost > 1 && !(c.Intra.Bandwidth > 0):
		return errors.New("model: the intra-host link needs a positive bandwidth")
	case c.Inter.Latency < 0 || c.Intra.Latency < 0 || math.IsNaN(c.Inter.Latency+c.Intra.Latency):
		return errors.New("model: latencies must be ≥ 0")
	}
	return nil
}

// flow is one message of a round: from rank to rank, bytes long.
type flow struct {
	from, to int
	bytes    float64
}

// roundTime is the cost of a round of flows that run at once: the
// latency of the slowest kind of link used, plus the largest transfer
// time of any host's inter-host link (bytes out and bytes in, each
// direction on its own) or of any rank's intra-host path.
func (c Cluster) roundTime(flows []flow) float64 {
	out := make(map[int]float64)
	in := make(map[int]float64)
	var lat, intra float64
	rankOut := make(map[int]float64)
	rankIn := make(map[int]float64)
	for _, f := range flows {
		hf, ht := f.from/c.RanksPerHost, f.to/c.RanksPerHost
		if hf == ht {
			lat = max(lat, c.Intra.Latency)
			rankOut[f.from] += f.bytes
			rankIn[f.to] += f.bytes
			continue
		}
		lat = max(lat, c.Inter.Latency)
		out[hf] += f.bytes
		in[ht] += f.bytes
	}
	var inter float64
	for _, m := range []map[int]float64{out, in} {
		for _, b := range m {
			inter = max(inter, b/c.Inter.Bandwidth)
		}
	}
	for _, m := range []map[int]float64{rankOut, rankIn} {
		for _, b := range m {
			intra = max(intra, b/c.Intra.Bandwidth)
		}
	}
	return lat + max(inter, intra)
}
