package tcp

import (
	"context"
	"errors"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

// fakePeer plays rank 1 of 2 up to a valid handshake and hello, then
// hands the connection to the test. It returns rank 0's group.
func fakePeer(t *testing.T, opts func(*Options)) (*Group, net.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	t.Cleanup(func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := st.Set(ctx, addrKey(1), []byte(ln.Addr().String())); err != nil {
		t.Fatal(err)
	}
	// The fake peer speaks only the TCP protocol, and says it has no
	// shared memory (an empty socket entry, as setupShm reads it).
	if err := st.Set(ctx, "tcp/shm/1", nil); err != nil {
		t.Fatal(err)
	}
	o := Options{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute,
		NoSharedMemory: true}
	if opts != nil {
		opts(&o)
	}
	fake := o
	fake.Rank = 1
	fake, err = fake.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			conns <- nil
			return
		}
		if _, err := wire.ServerHandshake(c, testSecret); err == nil {
			wire.WriteFrame(c, wire.Header{Kind: kindHello}, helloOf(fake).encode())
		}
		conns <- c
	}()
	g, err := New(ctx, st, o)
	if err != nil {
		ln.Close() // the fake may never have been dialed
	} else {
		t.Cleanup(func() { g.Close() })
	}
	c := <-conns
	if c != nil {
		t.Cleanup(func() { c.Close() }) // first, so g's Close drains to EOF at once
	}
	if err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	return g, c
}

func header(h wire.Header) []byte {
	b := make([]byte, wire.HeaderSize)
	h.Put(b)
	return b
}

// TestGarbageFromPeer: a peer that passed the handshake sends garbage.
// Rank 0's collective fails with a clear error naming the peer, and
// nothing crashes, hangs or leaks.
func TestGarbageFromPeer(t *testing.T) {
	for _, c := range []struct {
		name  string
		bytes []byte
		kind  error
		says  string
	}{
		{"random bytes", []byte("\x17\x03\x03 this is not a goddp frame at all, sorry"), pg.ErrComm, "corrupt frame header"},
		{"oversized frame", header(wire.Header{Kind: kindData, Len: 1 << 20}), pg.ErrComm, "exceeds the cap"},
		{"unknown kind", header(wire.Header{Kind: 99}), pg.ErrComm, "unknown frame kind"},
		{"bad abort frame", append(header(wire.Header{Kind: kindAbort, Len: 3}), 1, 2, 3), pg.ErrComm, "abort frame"},
		{"huge control frame", header(wire.Header{Kind: kindAbort, Len: maxControl + 1}), pg.ErrComm, "control frame"},
		// Recursive doubling on 2 ranks expects frame (seq 0, tag 1).
		{"wrong length", append(header(wire.Header{Kind: kindData, Tag: 1, Len: 3}), 1, 2, 3), pg.ErrMismatch,
			"expects 4096"},
		// Point-to-point frames that break the protocol.
		{"p2p overrun", append(header(wire.Header{Kind: kindP2P, Seq: 2, Len: 3}), 1, 2, 3), pg.ErrComm, "overruns"},
		{"p2p interrupted", append(append(header(wire.Header{Kind: kindP2P, Seq: 4, Len: 2}), 1, 2),
			append(header(wire.Header{Kind: kindP2P, Seq: 9, Len: 2}), 1, 2)...), pg.ErrComm, "interrupted"},
		{"p2p empty frames", append(header(wire.Header{Kind: kindP2P, Seq: 4, Len: 2}), append([]byte{1, 2},
			header(wire.Header{Kind: kindP2P, Seq: 4})...)...), pg.ErrComm, "overruns"},
		{"ack of nothing", append(header(wire.Header{Kind: kindP2PAck, Seq: 1, Len: 8}), 0, 0, 0, 0, 0, 0, 0, 0), pg.ErrComm,
			"bad ack"},
		{"huge ack", header(wire.Header{Kind: kindP2PAck, Seq: 1, Len: maxControl + 1}), pg.ErrComm, "control frame"},
		// The peer hangs up mid-frame (a reset, if our frames are unread).
		{"truncated frame", append(header(wire.Header{Kind: kindData, Tag: 1, Len: 4096}), 1, 2, 3), pg.ErrComm,
			"without a goodbye|connection reset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, peer := fakePeer(t, func(o *Options) { o.MaxFrame, o.ChunkBytes = 512<<10, 256<<10 })
			w := g.AllReduce(context.Background(), pg.NewTensor(pg.Float32, 1024), pg.Op(pg.Sum))
			peer.Write(c.bytes)
			if c.name == "truncated frame" {
				peer.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := w.Wait(ctx)
			var ce *pg.CollectiveError
			if !errors.As(err, &ce) || ce.Peer != 1 || !errors.Is(err, c.kind) ||
				!regexp.MustCompile(c.says).MatchString(err.Error()) {
				t.Fatalf("got %v, want a %v error naming rank 1 and saying %q", err, c.kind, c.says)
			}
			// The group has failed for good, and says why.
			if err := g.Barrier(context.Background()).Wait(ctx); !errors.Is(err, c.kind) {
				t.Errorf("barrier after the failure: got %v, want %v", err, c.kind)
			}
		})
	}
}
