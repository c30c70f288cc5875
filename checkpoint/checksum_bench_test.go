package checkpoint

import (
	"crypto/sha256"
	"hash/crc32"
	"testing"
)

// The checksum's cost per byte against SHA-256's, the alternative the
// issue names (Note [checksums]).
func BenchmarkChecksum(b *testing.B) {
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			crc32.Checksum(data, castagnoli)
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sha256.Sum256(data)
		}
	})
}
