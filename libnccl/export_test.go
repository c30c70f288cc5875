package libnccl

import "unsafe"

func offsetOf[T, F any](base *T, field *F) uintptr {
	return uintptr(unsafe.Pointer(field)) - uintptr(unsafe.Pointer(base))
}
