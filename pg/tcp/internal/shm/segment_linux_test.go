//go:build linux

package shm

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg/internal/wire"
)

var testSecret = []byte("the-job-secret-of-this-test-0123")

// TestHandshakeGuardsSegment: a client that does not hold the secret
// gets no descriptor from a rank's segment socket, while one that does
// gets a segment it can map.
func TestHandshakeGuardsSegment(t *testing.T) {
	c := Config{Rank: 0, Size: 2, Secret: testSecret, Hello: []byte("rank 1"), HandshakeTimeout: 10 * time.Second, Logger: zap.NewNop()}
	segs := make([][]byte, 2)
	name, ln, fd, err := listen(c, segs)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(segs[0])
	done := make(chan struct{})
	go func() { defer close(done); serve(ln, fd, c) }()
	defer func() { ln.Close(); <-done; unix.Close(fd) }()

	nc, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	wrong := []byte("not-the-job-secret-at-all")
	if err := wire.ClientHandshake(nc, wrong, c.Hello); err == nil {
		t.Error("the handshake with the wrong secret succeeded")
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, _ := nc.(*net.UnixConn).ReadMsgUnix(make([]byte, 1), oob)
	if oobn != 0 {
		t.Fatal("a client without the secret received a descriptor")
	}
	nc.Close()

	peer := c
	peer.Rank = 1
	m, err := dial(context.Background(), name, peer)
	if err != nil {
		t.Fatalf("a client with the secret got no segment: %v", err)
	}
	defer unix.Munmap(m)
	segs[0][HeaderBytes] = 42
	if m[HeaderBytes] != 42 {
		t.Fatal("the mapped segment is not the rank's")
	}
}
