package gemm

// The portable loops, which the tests run beside F32 and F64 on every
// machine; UseFMA says whether F32 and F64 ran the vector kernels.
var (
	PortableF32 = portable[float32]
	PortableF64 = portable[float64]
	UseFMA      = useFMA
)
