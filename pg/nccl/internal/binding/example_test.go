package binding_test

import (
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// DataType maps pg's dtypes to NCCL's, and says -1 for a dtype NCCL
// lacks, which NewDeviceBucket refuses.
func ExampleDataType() {
	fmt.Println(binding.DataType(pg.Float32), binding.DataType(pg.BFloat16), int(binding.DataType(pg.Dtype(0))))
	// Output: ncclFloat32 ncclBfloat16 -1
}
