package backend

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// A listener whose accept loop never runs (as a stopped process's) still
// answers: the kernel completes the handshake. A port nobody listens on
// refuses: the process is gone.
func TestProbeAddrTellsStoppedFromGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // never accepts
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p := ProbeAddr(ctx, ln.Addr().String()); p.Reach != pg.ReachAnswers || p.Err != nil ||
		p.Addr != ln.Addr().String() {
		t.Fatalf("a listener that never accepts: %+v, want answers", p)
	}
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := gone.Addr().String()
	gone.Close()
	if p := ProbeAddr(ctx, addr); p.Reach != pg.ReachRefused || p.Err == nil {
		t.Fatalf("a closed port: %+v, want refused", p)
	}
	if p := ProbeAddr(ctx, ""); p.Reach != pg.ReachUnknown {
		t.Fatalf("no address: %+v, want unknown", p)
	}
}

// The dial errors of a host that does not answer are told apart from a
// refusal and from errors that say nothing of the peer. (A real
// partition is probed in pg/tcp's TestNetbedProbe and cmd/ddp-train's
// TestNetbedFaults.)
func TestClassifyDial(t *testing.T) {
	op := func(errno error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}
	}
	live := context.Background()
	expired, cancel := context.WithTimeout(live, 0)
	defer cancel()
	tests := []struct {
		ctx  context.Context
		err  error
		want pg.Reach
	}{
		{live, op(syscall.ECONNREFUSED), pg.ReachRefused},
		{live, op(syscall.ECONNRESET), pg.ReachRefused},
		{live, op(syscall.EHOSTUNREACH), pg.ReachNoHost},
		{live, op(syscall.ENETUNREACH), pg.ReachNoHost},
		{expired, op(errors.New("operation was canceled")), pg.ReachNoHost},
		{live, &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, pg.ReachNoHost},
		{live, op(syscall.EMFILE), pg.ReachUnknown}, // this process is out of files: nothing about the peer
	}
	for _, tt := range tests {
		if got := classifyDial(tt.ctx, tt.err); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.err, got, tt.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }
