package scalemodel

import "errors"

// Synthetic describes a model not at hand, for a first estimate: its size
// and compute time, with the rest assumed (see SyntheticProfile).
type Synthetic struct {
	Params   float64 // parameters
	Forward  float64 // seconds
	Backward float64 // seconds
	Other    float64 // seconds
	// FirstBucket and BucketCap are the reducer's caps in bytes; zero
	// means DDP's defaults, 1 MiB and 25 MiB.
	FirstBucket, BucketCap float64
	// Rows is the first dimension of the matrices each bucket is assumed
	// to hold (for PowerSGD); zero means 1024.
	Rows int
}

// SyntheticProfile builds a profile from s, assuming float32 gradients
// that become ready at a constant rate in bytes through backward, packed
// into buckets in that order (the first capped at FirstBucket, the rest
// at BucketCap), each bucket a stack of Rows×Rows matrices (the last
// one narrower). Measured profiles (ddp-train --timeline) are better;
// this is for models one cannot run yet.
func SyntheticProfile(s Synthetic) (Profile, error) {
	if !(s.Params > 0) || s.Forward < 0 || s.Backward < 0 || s.Other < 0 {
		return Profile{}, errors.New("model: a synthetic profile needs Params > 0 and times ≥ 0")
	}
	first, capB := s.FirstBucket, s.BucketCap
	if first <= 0 {
		first = 1 << 20
	}
	if capB <= 0 {
		capB = 25 << 20
	}
	rows := s.Rows
	if rows <= 0 {
		rows = 1024
	}
	total := s.Params * 4
	p := Profile{Forward: s.Forward, Backward: s.Backward, Other: s.Other}
	for done := 0.0; done < total; {
		size := min(capB, total-done)
		if len(p.Buckets) == 0 {
			size = min(first, total)
		}
		done += size
		p.Buckets = append(p.Buckets, Bucket{Ready: s.Backward * done / total, Bytes: size, Params: matrices(size/4, rows)})
	}
	return p, nil
}

// matrices cuts elems elements into rows×rows matrices and one rows×k.
func matrices(elems float64, rows int) []Param {
	var out []Param
	sq := float64(rows * rows)
	for ; elems >= sq; elems -= sq {
		out = append(out, Param{Rows: rows, Cols: rows})
	}
	if k := int(elems) / rows; k > 0 {
		out = append(out, Param{Rows: rows, Cols: k})
	}
	if r := int(elems) % rows; r > 0 {
		out = append(out, Param{Rows: r})
	}
	return out
}
