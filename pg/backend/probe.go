package backend

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/goddp/ddp/pg"
)

// The probes tell a dead network from a dead process: Note [network or
// process] in package pg (reach.go), whose StallError words what they find.

// Probe is the result of one network probe of a rank.
type Probe struct {
	Reach pg.Reach
	Addr  string // the address dialed ("10.0.0.2:41234"); "" when none is known
	Err   error  // the dial's error; nil when it connected
}

// PeerProber is implemented by groups that can probe a peer rank's host
// at the network level: Note [network or process]. ProbePeer must return
// by ctx's deadline and must not need the peer's process to run.
type PeerProber interface {
	ProbePeer(ctx context.Context, rank int) Probe
}

// ProbeAddr dials addr once over TCP, bounded by ctx, closes what it
// got, and classifies the outcome: Note [network or process].
func ProbeAddr(ctx context.Context, addr string) Probe {
	if addr == "" {
		return Probe{}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return Probe{Reach: pg.ReachAnswers, Addr: addr}
	}
	return Probe{Reach: classifyDial(ctx, err), Addr: addr, Err: err}
}

// classifyDial says what a failed dial found. Errno names are matched
// in the error's text so that the classification is the same on every
// platform (syscall's errno values differ between them).
func classifyDial(ctx context.Context, err error) pg.Reach {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "connection reset"):
		return pg.ReachRefused
	case errors.Is(ctx.Err(), context.DeadlineExceeded), isTimeout(err),
		strings.Contains(msg, "no route to host"), strings.Contains(msg, "network is unreachable"),
		strings.Contains(msg, "host is down"), strings.Contains(msg, "host is unreachable"):
		return pg.ReachNoHost
	}
	return pg.ReachUnknown
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
