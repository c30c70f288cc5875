//go:build linux

package shm

import (
	"context"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg/internal/wire"
)

var testSecret = []byte("the-job-secret-of-this-test-0123")

// TestHandshakeGuardsSegment: a client that does not hold the secret
// gets no descriptor from a rank's segment socket, while one that does
// gets a segment it can map.
func TestHandshakeGuardsSegment(t *testing.T) {
	c := Config{Rank: 0, Size: 2, Secret: testSecret, Hello: []byte("rank 1"), HandshakeTimeout: 10 * time.Second,
		Logger: zap.NewNop()}
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

// TestSegmentFloodRateLimited: 500 clients that fail the handshake on a
// rank's segment socket give two lines, the first refusal and a count
// of the rest, not 500 (Note [rate-limited refusals]).
func TestSegmentFloodRateLimited(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	c := Config{Rank: 0, Size: 2, Secret: testSecret, Hello: []byte("rank 1"), HandshakeTimeout: 10 * time.Second,
		Logger: zap.New(core)}
	segs := make([][]byte, 2)
	name, ln, fd, err := listen(c, segs)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(segs[0])
	done := make(chan struct{})
	go func() { defer close(done); serve(ln, fd, c) }()
	const flood = 500
	for range flood {
		nc, err := net.Dial("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		wire.ClientHandshake(nc, []byte("not-the-job-secret-at-all"), c.Hello)
		io.Copy(io.Discard, nc) // until the rank closes it: refused
		nc.Close()
	}
	ln.Close()
	<-done
	unix.Close(fd)
	total := 0
	for _, e := range logs.All() {
		if m := regexp.MustCompile(`^shared memory: refused (\d+) more ` +
			`connections$`).FindStringSubmatch(e.Message); m != nil {
			n, _ := strconv.Atoi(m[1])
			total += n
		} else if strings.HasPrefix(e.Message, "shared memory: refused connection: ") {
			total++
		}
	}
	if logs.Len() > 2 || total != flood {
		t.Errorf("%d refused connections: %d lines counting %d, want at most 2 counting %d: %v", flood, logs.Len(), total,
			flood, logs.All())
	}
}
