package pg

import "fmt"

// ReduceKind names a reduction, with the meanings of c10d's ReduceOp.
type ReduceKind uint8

// The reductions. The zero value is Sum.
const (
	Sum ReduceKind = iota
	Avg
	Product
	Min
	Max
	Band
	Bor
	Bxor
	PremulSum
)

func (k ReduceKind) String() string {
	switch k {
	case Sum:
		return "SUM"
	case Avg:
		return "AVG"
	case Product:
		return "PRODUCT"
	case Min:
		return "MIN"
	case Max:
		return "MAX"
	case Band:
		return "BAND"
	case Bor:
		return "BOR"
	case Bxor:
		return "BXOR"
	case PremulSum:
		return "PREMUL_SUM"
	}
	return fmt.Sprintf("ReduceKind(%d)", uint8(k))
}

// ReduceOp is a reduction and, for PremulSum, the factor every input is
// multiplied by before summing. The zero value is SUM.
//
// As in NCCL, AVG on floating-point data multiplies each input by 1/size
// and sums; on integers it sums and then divides, truncating toward zero.
type ReduceOp struct {
	Kind   ReduceKind
	Factor float64
}

// Op returns the ReduceOp of kind k (without a factor).
func Op(k ReduceKind) ReduceOp { return ReduceOp{Kind: k} }

// PremulSumOp returns PREMUL_SUM with the given factor.
func PremulSumOp(factor float64) ReduceOp { return ReduceOp{Kind: PremulSum, Factor: factor} }

func (o ReduceOp) String() string {
	if o.Kind == PremulSum {
		return fmt.Sprintf("PREMUL_SUM(%g)", o.Factor)
	}
	return o.Kind.String()
}

// Check reports whether o can reduce elements of type d. Bitwise
// operations need integers; PREMUL_SUM needs floating point.
func (o ReduceOp) Check(d Dtype) error {
	switch o.Kind {
	case Sum, Avg, Product, Min, Max:
		return nil
	case Band, Bor, Bxor:
		if d.IsFloat() {
			return fmt.Errorf("%w: %v needs an integer dtype, got %v", ErrInvalidArgument, o.Kind, d)
		}
		return nil
	case PremulSum:
		if !d.IsFloat() {
			return fmt.Errorf("%w: PREMUL_SUM needs a floating-point dtype, got %v", ErrInvalidArgument, d)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown reduce op %v", ErrInvalidArgument, o.Kind)
}
