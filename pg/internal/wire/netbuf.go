package wire

import "net"

func netBuffers(b ...[]byte) *net.Buffers {
	nb := net.Buffers(b)
	return &nb
}
