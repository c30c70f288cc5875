// Package libnccl binds NVIDIA's NCCL and the parts of the CUDA driver API that
// a process group needs, loaded at run time with purego, so that the module
// builds with CGO_ENABLED=0 and the same binary runs on machines with and
// without GPUs.
//
// Load finds libnccl.so.2: an explicit path first, then the system's
// search path, then the copy inside an installed PyTorch
// (site-packages/nvidia/nccl/lib under the Python prefixes the caller
// names). The library never reads environment variables; cmd/ reads
// GODDP_NCCL_LIBRARY and passes it as Options.Path. LoadCUDA opens the CUDA
// driver (libcuda.so.1, installed with every NVIDIA driver).
//
//	lib, err := libnccl.Load(libnccl.Options{PythonPrefixes: []string{"/opt/torch/.venv"}})
//	cu, err := libnccl.LoadCUDA(libnccl.CUDAOptions{})
//	dev, err := cu.Device(0)
//	id, err := lib.UniqueID()
//	comm, err := lib.CommInitRank(dev, 1, id, 0)
//	err = comm.AllReduce(buf, buf, n, libnccl.Float32, libnccl.Sum, stream)
//
// # Threads
//
// CUDA's current context is per OS thread and goroutines move between
// threads. Every call that needs a device (allocation, copies, streams,
// events, and every NCCL call on a communicator) runs through Device.Do,
// which locks the goroutine to its thread, makes the device's primary
// context current and unlocks after the call. Setting the context costs
// well under a microsecond; in exchange, any goroutine may call any method.
//
// # ncclUniqueId by value
//
// ncclCommInitRank takes the 128-byte ncclUniqueId by value. On x86-64 (System
// V) a struct that large is passed in memory: the caller copies it onto the
// stack where the arguments beyond the sixth integer register go, and the
// integer arguments after it still take registers. The binding therefore
// calls ncclCommInitRank(comm, nranks, rank, 0, 0, 0, id[0:8], ..., id[120:128]):
// rdi, rsi and rdx carry comm, nranks and rank, rcx, r8 and r9 carry
// padding, and the sixteen words land on the stack exactly where the copy
// goes. On arm64 (AAPCS64) a composite larger than 16 bytes is passed as a
// pointer to a caller-made copy, so the binding passes a pointer there.
// Other architectures get an error.
//
// # Optional APIs
//
// Symbols newer than NCCL 2.0 are optional: a missing one, or a library
// older than the version that introduced it, makes the method return an
// error wrapping ErrUnsupported. HasMemAlloc, HasRegister and HasWindows
// say up front whether ncclMemAlloc (2.19), ncclCommRegister (2.19) and
// ncclCommWindowRegister with WinCollSymmetric (2.27) can be used.
package libnccl
