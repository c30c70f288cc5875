package scalemodel

import (
	"errors"
	"fmt"
)

// Param is one parameter's shape as PowerSGD views it: Rows is its first
// dimension and Cols the product of the rest; Cols 0 marks a 1-D tensor.
type Param struct {
	Rows int `json:"rows"`
	Cols int `json:"cols,omitempty"`
}

// Bucket is one bucket of the reducer, as measured.
type Bucket struct {
	// Ready is when the bucket was complete (its launch), in seconds after
	// backward began.
	Ready float64 `json:"ready_s"`
	// Bytes is the bucket's size in its parameters' dtype.
	Bytes float64 `json:"bytes"`
	// ElemBytes is the size of one element; 0 means 4 (float32).
	ElemBytes float64 `json:"elem_bytes,omitempty"`
	// Params are its parameters' shapes, which only PowerSGD needs.
	Params []Param `json:"params,omitempty"`
}

func (b Bucket) elemBytes() float64 {
	if b.ElemBytes > 0 {
		return b.ElemBytes
	}
	return 4
}

// Profile is one rank's step without communication, measured on the
// hardware each rank will have.
type Profile struct {
	Forward  float64  `json:"forward_s"`
	Backward float64  `json:"backward_s"`
	Other    float64  `json:"other_s"` // the rest of a step: optimizer, data, copies back
	Buckets  []Bucket `json:"buckets"` // in launch order
}

// Validate says what is wrong with p, or nil.
func (p Profile) Validate() error {
	if p.Forward < 0 || p.Backward < 0 || p.Other < 0 {
		return errors.New("model: profile times must be ≥ 0")
	}
	for i, b := range p.Buckets {
		if b.Ready < 0 || b.Bytes < 0 {
			return fmt.Errorf("model: bucket %d: ready time and bytes must be ≥ 0", i)
		}
	}
	return nil
}

// Compute is the step time without communication: one rank alone.
func (p Profile) Compute() float64 { return p.Forward + p.Backward + p.Other }

// Prediction is the model's answer for one cluster, algorithm and hook.
type Prediction struct {
	Step       float64 // seconds per step
	Comm       float64 // seconds of communication per step, hidden or not
	Exposed    float64 // seconds a step waits for communication after backward
	Hidden     float64 // share of Comm overlapped with backward, in [0, 1]
	Efficiency float64 // Profile.Compute / Step: weak-scaling efficiency
	BytesSent  float64 // bytes allreduced per step, after the hook
}

// Predict runs the model: each bucket's collectives in order on one
// stream, the first starting at the later of the bucket's ready time and
// the end of the previous bucket's.
func Predict(p Profile, c Cluster, a Algorithm, h Hook) Prediction {
	var end, comm, sent float64
	for _, b := range p.Buckets {
		end = max(end, b.Ready)
		for _, s := range h.Collectives(b) {
			t := c.AllReduceTime(a, s)
			end += t
			comm += t
			sent += s
		}
	}
	exposed := max(end-p.Backward, 0)
	if c.Ranks() == 1 {
		exposed, comm, sent = 0, 0, 0
	}
	pr := Prediction{Step: p.Compute() + exposed, Comm: comm, Exposed: exposed, BytesSent: sent, Hidden: 1}
	if comm > 0 {
		pr.Hidden = 1 - exposed/comm
	}
	if pr.Step > 0 {
		pr.Efficiency = p.Compute() / pr.Step
	}
	return pr
}
