package tcp

import (
	"fmt"
	"testing"
)

func BenchmarkTune(b *testing.B) {
	for _, chunk := range []int{256 << 10, 512 << 10, 1 << 20, 2 << 20} {
		for _, sb := range []int{-1, 4 << 20} {
			b.Run(fmt.Sprintf("chunk=%d/sb=%d", chunk>>10, sb), func(b *testing.B) {
				benchAllReduce(b, 2, 64<<20, func(o *Options) { o.ChunkBytes = chunk; o.SocketBuffer = sb })
			})
		}
	}
}
