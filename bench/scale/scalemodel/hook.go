package scalemodel

import (
	"fmt"
	"strconv"
	"strings"
)

// HookKind is which comm hook a bucket goes through.
type HookKind int

const (
	Allreduce HookKind = iota // commhook.Allreduce: the bucket as it is
	FP16                      // commhook.FP16Compress: half the bytes of a 4-byte bucket
	BF16                      // commhook.BF16Compress: as FP16
	PowerSGD                  // commhook.PowerSGD, after its StartIter
)

// Hook is a comm hook and its settings.
type Hook struct {
	Kind HookKind
	// Rank is PowerSGD's matrix approximation rank (at least 1).
	Rank int
	// MinCompressionRate is PowerSGD's: an n×m matrix is compressed only
	// when (n+m)·r·MinCompressionRate < n·m. Zero means torch's 2.
	MinCompressionRate float64
}

// String is the hook's name as ParseHook reads it: "allreduce",
// "fp16", "bf16", "powersgd:R".
func (h Hook) String() string {
	switch h.Kind {
	case Allreduce:
		return "allreduce"
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	case PowerSGD:
		return "powersgd:" + strconv.Itoa(h.Rank)
	}
	return fmt.Sprintf("Hook(%d)", int(h.Kind))
}

// ParseHook reads a hook's name: allreduce, fp16, bf16, powersgd (rank
// 1) or powersgd:R.
func ParseHook(s string) (Hook, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	switch {
	case name == "allreduce" && !hasArg:
		return Hook{Kind: Allreduce}, nil
	case name == "fp16" && !hasArg:
		return Hook{Kind: FP16}, nil
	case name == "bf16" && !hasArg:
		return Hook{Kind: BF16}, nil
	case name == "powersgd" && !hasArg:
		return Hook{Kind: PowerSGD, Rank: 1}, nil
	case name == "powersgd":
		r, err := strconv.Atoi(arg)
		if err != nil || r < 1 {
			return Hook{}, fmt.Errorf("model: hook %q: the PowerSGD rank must be a whole number ≥ 1", s)
		}
		return Hook{Kind: PowerSGD, Rank: r}, nil
	}
	return Hook{}, fmt.Errorf("model: no hook %q; want allreduce, fp16, bf16, powersgd or powersgd:R", s)
}

// Collectives are the allreduces, in bytes and in order, one bucket
// costs with hook h. PowerSGD's are the uncompressed tensors, the Ps and
// the Qs (zero-byte ones are dropped); a bucket whose parameters have no
// shapes is sent uncompressed.
func (h Hook) Collectives(b Bucket) []float64 {
	elem := b.elemBytes()
	switch h.Kind {
	case FP16, BF16:
		if elem > 2 {
			return []float64{b.Bytes / elem * 2}
		}
		return []float64{b.Bytes}
	case PowerSGD:
		return h.powerSGD(b, elem)
	}
	return []float64{b.Bytes}
}

func (h Hook) powerSGD(b Bucket, elem float64) []float64 {
	if len(b.Params) == 0 {
		return []float64{b.Bytes}
	}
	rate := h.MinCompressionRate
	if rate == 0 {
		rate = 2
	}
	var u, p, q float64 // elements
	for _, pr := range b.Params {
		n, m := pr.Rows, max(pr.Cols, 1)
		r := min(n, m, max(h.Rank, 1))
		if pr.Cols < 1 || float64((n+m)*r)*rate >= float64(n*m) {
			u += float64(n * m)
			continue
		}
		p += float64(n * r)
		q += float64(m * r)
	}
	var out []float64
	for _, e := range []float64{u, p, q} {
		if e > 0 {
			out = append(out, e*elem)
		}
	}
	return out
}
