package tcp

import (
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// helloMagic starts every hello.
const helloMagic = "goddp-pg-tcp/2" // 2: point-to-point frames, coalesced parts in Flags

// hello is what each end of a new connection says about itself, once it
// has proven it holds the secret: the dialer in the handshake, the
// accepting side in a hello frame. Besides the rank, it carries the knobs
// every rank must share, since they decide which algorithm a collective
// runs and how it is cut into frames.
type hello struct {
	rank, size                int
	ringThreshold, chunkBytes int
}

func helloOf(o Options) hello {
	return hello{rank: o.Rank, size: o.Size, ringThreshold: o.RingThreshold, chunkBytes: o.ChunkBytes}
}

func (h hello) encode() []byte {
	b := wire.AppendString(nil, helloMagic)
	for _, v := range []int{h.rank, h.size, h.ringThreshold, h.chunkBytes} {
		b = wire.AppendUint64(b, uint64(v))
	}
	return b
}

func decodeHello(p []byte) (hello, error) {
	d := wire.NewDecoder(p)
	magic := d.String()
	var v [4]uint64
	for i := range v {
		v[i] = d.Uint64()
	}
	if err := d.Finish(); err != nil {
		return hello{}, err
	}
	if magic != helloMagic {
		return hello{}, fmt.Errorf("%w: hello %q is not a goddp process group's", pg.ErrComm, magic)
	}
	for _, x := range v {
		if x > math.MaxInt {
			return hello{}, fmt.Errorf("%w: hello field %d is out of range", pg.ErrComm, x)
		}
	}
	return hello{rank: int(v[0]), size: int(v[1]), ringThreshold: int(v[2]), chunkBytes: int(v[3])}, nil
}

// check verifies that h comes from a rank of this job, configured alike,
// and that its rank is in [lo, hi).
func (h hello) check(o Options, lo, hi int) error {
	mine := helloOf(o)
	switch {
	case h.size != mine.size || h.rank < lo || h.rank >= hi:
		return fmt.Errorf("%w: the peer says it is rank %d of %d; rank %d of %d expected a rank in [%d, %d) of %d (stale "+
			"address in the store?)",
			pg.ErrMismatch, h.rank, h.size, o.Rank, o.Size, lo, hi, o.Size)
	case h.ringThreshold != mine.ringThreshold || h.chunkBytes != mine.chunkBytes:
		return fmt.Errorf(
			"%w: rank %d has RingThreshold %d and ChunkBytes %d, rank %d has %d and %d: every rank must use the same",
			pg.ErrMismatch, h.rank, h.ringThreshold, h.chunkBytes, o.Rank, mine.ringThreshold, mine.chunkBytes)
	}
	return nil
}
