package libnccl

// DataType is ncclDataType_t (nccl.h). BFloat16 needs NCCL 2.10 built
// with CUDA 11.
type DataType int32

// The data types.
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9
)

// Size is the element size in bytes, 0 for unknown types.
func (d DataType) Size() int {
	switch d {
	case Int8, Uint8:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

func (d DataType) String() string {
	switch d {
	case Int8:
		return "ncclInt8"
	case Uint8:
		return "ncclUint8"
	case Int32:
		return "ncclInt32"
	case Uint32:
		return "ncclUint32"
	case Int64:
		return "ncclInt64"
	case Uint64:
		return "ncclUint64"
	case Float16:
		return "ncclFloat16"
	case Float32:
		return "ncclFloat32"
	case Float64:
		return "ncclFloat64"
	case BFloat16:
		return "ncclBfloat16"
	}
	return "ncclDataType(?)"
}

// RedOp is ncclRedOp_t: one of the built-in operations, or a handle
// returned by Comm.CreatePreMulSum.
type RedOp int32

// The built-in operations. Avg needs NCCL 2.10.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// Version is NCCL_VERSION_CODE: major*10000 + minor*100 + patch since
// 2.9 (major*1000 + minor*100 + patch before).
type Version int

// MakeVersion returns the code of major.minor.patch, as NCCL_VERSION.
func MakeVersion(major, minor, patch int) Version {
	if major <= 2 && minor <= 8 {
		return Version(major*1000 + minor*100 + patch)
	}
	return Version(major*10000 + minor*100 + patch)
}

// Parts splits the code into major, minor and patch.
func (v Version) Parts() (major, minor, patch int) {
	n := int(v)
	if n < 10000 {
		return n / 1000, n % 1000 / 100, n % 100
	}
	return n / 10000, n % 10000 / 100, n % 100
}

func (v Version) String() string {
	a, b, c := v.Parts()
	return itoa(a) + "." + itoa(b) + "." + itoa(c)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// The API milestones the binding checks before calling.
const (
	versionSendRecv   Version = 20700 // 2.7.0: ncclSend, ncclRecv
	versionAvg        Version = 21000 // 2.10.0: ncclAvg
	versionPreMulSum  Version = 21100 // 2.11.0: ncclRedOpCreatePreMulSum
	versionLastError  Version = 21300 // 2.13.0: ncclGetLastError
	versionInitConfig Version = 21400 // 2.14.0: ncclCommInitRankConfig, non-blocking
	versionSplit      Version = 21800 // 2.18.0: ncclCommSplit
)
