package libnccl

import (
	"math"
	"unsafe"
)

// The collectives enqueue work on stream and return; the work is done
// when the stream passes it (record an Event to know). Counts are in
// elements of dt. Buffers are device memory. In-place is allowed as NCCL
// documents it (sendbuf == recvbuf; for AllGather and ReduceScatter, the
// rank's chunk of the larger buffer).

// AllReduce is ncclAllReduce (2.0).
func (c *Comm) AllReduce(send, recv DevicePtr, count int, dt DataType, op RedOp, s *Stream) error {
	return c.do("ncclAllReduce", c.lib.fn.allReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt),
		uintptr(op), c.h, s.h)
}

// Reduce is ncclReduce (2.0); recv is used on root only.
func (c *Comm) Reduce(send, recv DevicePtr, count int, dt DataType, op RedOp, root int, s *Stream) error {
	return c.do("ncclReduce", c.lib.fn.reduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op),
		uintptr(root), c.h, s.h)
}

// Broadcast is ncclBroadcast (2.2).
func (c *Comm) Broadcast(send, recv DevicePtr, count int, dt DataType, root int, s *Stream) error {
	return c.do("ncclBroadcast", c.lib.fn.broadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt),
		uintptr(root), c.h, s.h)
}

// AllGather is ncclAllGather (2.0); sendCount elements per rank.
func (c *Comm) AllGather(send, recv DevicePtr, sendCount int, dt DataType, s *Stream) error {
	return c.do("ncclAllGather", c.lib.fn.allGather, uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), c.h,
		s.h)
}

// ReduceScatter is ncclReduceScatter (2.0); recvCount elements per rank.
func (c *Comm) ReduceScatter(send, recv DevicePtr, recvCount int, dt DataType, op RedOp, s *Stream) error {
	return c.do("ncclReduceScatter", c.lib.fn.reduceScatter, uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt),
		uintptr(op), c.h, s.h)
}

// Send is ncclSend (2.7). Match it with Recv on peer, usually inside a
// Group with the opposite Recv to avoid deadlock.
func (c *Comm) Send(buf DevicePtr, count int, dt DataType, peer int, s *Stream) error {
	if !c.lib.Has(versionSendRecv) {
		return c.lib.unsupported("ncclSend", versionSendRecv)
	}
	return c.do("ncclSend", c.lib.fn.send, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), c.h, s.h)
}

// Recv is ncclRecv (2.7).
func (c *Comm) Recv(buf DevicePtr, count int, dt DataType, peer int, s *Stream) error {
	if !c.lib.Has(versionSendRecv) {
		return c.lib.unsupported("ncclRecv", versionSendRecv)
	}
	return c.do("ncclRecv", c.lib.fn.recv, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), c.h, s.h)
}

// HasAvg reports whether the library has ncclAvg (2.10).
func (l *Library) HasAvg() bool { return l.Has(versionAvg) }

// CreatePreMulSum is ncclRedOpCreatePreMulSum (2.11) with a host scalar
// (ncclScalarHostImmediate): a sum that first multiplies every input by
// factor. dt must be a floating-point type; the factor is converted to
// it. Release the op with DestroyRedOp after the last call that uses it
// has returned.
func (c *Comm) CreatePreMulSum(factor float64, dt DataType) (RedOp, error) {
	if !c.lib.Has(versionPreMulSum) || c.lib.fn.redOpCreatePMS == 0 {
		return 0, c.lib.unsupported("ncclRedOpCreatePreMulSum", versionPreMulSum)
	}
	scalar := new([8]byte)
	switch dt {
	case Float64:
		*(*float64)(unsafe.Pointer(scalar)) = factor
	case Float32:
		*(*float32)(unsafe.Pointer(scalar)) = float32(factor)
	case Float16:
		*(*uint16)(unsafe.Pointer(scalar)) = Float32ToHalf(float32(factor))
	case BFloat16:
		*(*uint16)(unsafe.Pointer(scalar)) = uint16(math.Float32bits(float32(factor)) >> 16)
	default:
		return 0, c.lib.unsupported("ncclRedOpCreatePreMulSum on "+dt.String(), 0)
	}
	op := new(int32)
	err := c.do("ncclRedOpCreatePreMulSum", c.lib.fn.redOpCreatePMS, uintptr(unsafe.Pointer(op)),
		uintptr(unsafe.Pointer(scalar)), uintptr(dt), 1, c.h)
	return RedOp(*op), err
}

// DestroyRedOp is ncclRedOpDestroy (2.11).
func (c *Comm) DestroyRedOp(op RedOp) error {
	return c.do("ncclRedOpDestroy", c.lib.fn.redOpDestroy, uintptr(op), c.h)
}

// Float32ToHalf rounds f to the nearest IEEE 754 half (ties to even).
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint16(mant >> shift)
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || rem == mid && half&1 == 1 {
			half++
		}
		return sign | half
	}
	half := uint16(exp)<<10 | uint16(mant>>13)
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && half&1 == 1 {
		half++
	}
	return sign | half
}
