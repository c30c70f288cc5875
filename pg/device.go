package pg

import "fmt"

// ErrDeviceTensor is the error of a host-only backend (pg/local, pg/tcp)
// given a tensor in device memory. It wraps ErrInvalidArgument, so
// errors.Is(err, ErrInvalidArgument) holds for it too.
var ErrDeviceTensor = fmt.Errorf("%w: device tensor on a host-only process group (use an NCCL group or copy to host)",
	ErrInvalidArgument)

// DeviceMemory is the device memory a Tensor describes: Bytes bytes at
// Ptr on GPU Ordinal. goddp neither allocates nor frees it; the caller
// owns it (for example through package libnccl's Device.Malloc) and keeps it
// alive until the Work using it is done.
type DeviceMemory struct {
	Ordinal int     // the GPU's ordinal
	Ptr     uintptr // the device address of element 0 (CUdeviceptr)
	Bytes   int     // the length in bytes
}

// DeviceTensor describes bytes bytes of device memory at ptr on GPU
// device as a tensor of d. Only device-capable backends (pg/nccl) accept
// it; see Tensor.
func DeviceTensor(d Dtype, device int, ptr uintptr, bytes int) Tensor {
	return Tensor{Dtype: d, Device: &DeviceMemory{Ordinal: device, Ptr: ptr, Bytes: bytes}}
}

// IsDevice reports whether t describes device memory.
func (t Tensor) IsDevice() bool { return t.Device != nil }

// Bytes is t's length in bytes, on the host or on the device.
func (t Tensor) Bytes() int {
	if t.Device != nil {
		return t.Device.Bytes
	}
	return len(t.Data)
}

func (t Tensor) validateDevice() error {
	m := t.Device
	if t.Data != nil {
		return fmt.Errorf("%w: a tensor holds both host bytes and device memory; set one", ErrInvalidArgument)
	}
	if m.Ordinal < 0 {
		return fmt.Errorf("%w: device tensor on GPU %d", ErrInvalidArgument, m.Ordinal)
	}
	if m.Bytes < 0 {
		return fmt.Errorf("%w: device tensor of %d bytes", ErrInvalidArgument, m.Bytes)
	}
	if m.Ptr == 0 && m.Bytes > 0 {
		return fmt.Errorf("%w: device tensor of %d bytes at a null pointer", ErrInvalidArgument, m.Bytes)
	}
	return nil
}
