package tcp

import (
	"runtime"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/internal/wire"
)

// TestPeerFrameClaimsCostWhatArrives: a peer announces a frame of
// MaxFrame (64 MiB) that no collective or Recv waits for yet, and sends
// 100 bytes of it. Rank 0 keeps what arrived, not what was announced.
func TestPeerFrameClaimsCostWhatArrives(t *testing.T) {
	for _, c := range []struct {
		name string
		h    wire.Header
	}{
		{"collective frame", wire.Header{Kind: kindData, Seq: 5, Tag: 3, Len: DefaultMaxFrame}},
		{"point-to-point message", wire.Header{Kind: kindP2P, Seq: 1 << 40, Tag: 7, Len: DefaultMaxFrame}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, peer := fakePeer(t, nil)
			base := liveHeap()
			peer.Write(append(header(c.h), make([]byte, 100)...))
			time.Sleep(200 * time.Millisecond) // for the reader to take the bytes
			grew := liveHeap() - base
			t.Logf("%d MiB announced, 100 bytes sent: the live heap grew by %.2f MiB", c.h.Len>>20, float64(grew)/(1<<20))
			if grew > 4<<20 {
				t.Errorf("a frame announcing %d MiB, of which 100 bytes came, grew the live heap by %.1f MiB", c.h.Len>>20,
					float64(grew)/(1<<20))
			}
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
