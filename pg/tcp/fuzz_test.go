package tcp

import (
	"errors"
	"testing"

	"github.com/goddp/ddp/pg"
)

// FuzzControlFrames feeds arbitrary bytes to the decoders of every
// control payload a peer can send (hello, abort, monitored-barrier
// result). They must never panic, and what they accept must be in range.
func FuzzControlFrames(f *testing.F) {
	f.Add(encodeAbort(&failure{kind: pg.ErrTimeout, peer: 3, err: errors.New("no progress")}))
	f.Add(hello{rank: 2, size: 4, ringThreshold: 1 << 10, chunkBytes: 1 << 20}.encode())
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		const self, size = 1, 4
		if fl, err := decodeAbort(p, 2, self, size); err == nil {
			if fl.peer < 0 || fl.peer >= size || fl.peer == self || !errors.Is(fl.kind, pg.ErrRemote) {
				t.Errorf("decodeAbort accepted %x as %+v", p, fl)
			}
		}
		o := Options{Rank: 3, Size: size, RingThreshold: 1 << 10, ChunkBytes: 1 << 20}
		if h, err := decodeHello(p); err == nil && h.check(o, 0, 3) == nil && (h.rank < 0 || h.rank >= 3) {
			t.Errorf("decodeHello accepted %x as %+v", p, h)
		}
		if missing, err := decodeMissing(p, size); err == nil {
			for _, m := range missing {
				if m <= 0 || m >= size {
					t.Errorf("decodeMissing accepted %x as %v", p, missing)
				}
			}
		}
	})
}

// TestAbortRoundTrip: an abort frame blames the rank the sender blamed,
// or the sender when that is the receiver itself or nobody, and keeps the
// original kind visible to errors.Is.
func TestAbortRoundTrip(t *testing.T) {
	for _, c := range []struct{ blamed, want int }{{3, 3}, {1, 2}, {pg.NoPeer, 2}, {7, 2}} {
		p := encodeAbort(&failure{kind: pg.ErrTimeout, peer: c.blamed, err: errors.New("no progress")})
		f, err := decodeAbort(p, 2, 1, 4)
		if err != nil || f.peer != c.want || !errors.Is(f.err, pg.ErrTimeout) || f.kind != pg.ErrRemote {
			t.Errorf("blamed %d: got %+v, %v; want ErrRemote naming %d and wrapping ErrTimeout", c.blamed, f, err, c.want)
		}
	}
}
