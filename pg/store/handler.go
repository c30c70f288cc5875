package store

import (
	"bufio"
	"context"
	"errors"
	"net"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// handle runs req against the server's table and returns the response. keep
// is false when the connection must be dropped instead of answered: the
// server is closing, or the client hung up while its request was parked.
func (s *Server) handle(conn net.Conn, br *bufio.Reader, req request) (status uint8, body []byte, keep bool) {
	ctx := context.Background() // only get and wait block, and they get a deadline in park
	var err error
	switch req.op {
	case opSet:
		err = s.table.Set(ctx, req.key(), req.value)
	case opGet:
		err = s.park(conn, br, req.wait, func(ctx context.Context) (err error) {
			body, err = s.table.Get(ctx, req.key())
			return err
		})
	case opAdd:
		var sum int64
		sum, err = s.table.Add(ctx, req.key(), req.delta)
		body = wire.AppendUint64(nil, uint64(sum))
	case opCompareSet:
		body, err = s.table.CompareSet(ctx, req.key(), req.value, req.desired)
	case opWait:
		err = s.park(conn, br, req.wait, func(ctx context.Context) error {
			return s.table.Wait(ctx, req.keys...)
		})
	case opDelete:
		var existed bool
		existed, err = s.table.Delete(ctx, req.key())
		body = wire.AppendUint64(nil, boolUint(existed))
	case opNumKeys:
		var n int64
		n, err = s.table.NumKeys(ctx)
		body = wire.AppendUint64(nil, uint64(n))
	}
	return statusOf(err, body)
}

func statusOf(err error, body []byte) (status uint8, _ []byte, keep bool) {
	switch {
	case err == nil:
		return statusOK, body, true
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled):
		return 0, nil, false // the server is closing, or the client left
	case errors.Is(err, pg.ErrTimeout):
		return statusTimeout, []byte(err.Error()), true
	case errors.Is(err, pg.ErrInvalidArgument):
		return statusInvalid, []byte(err.Error()), true
	default:
		return statusError, []byte(err.Error()), true
	}
}

// park runs a blocking table call for at most wait, and cancels it if the
// client hangs up meanwhile, so a dead rank does not hold a parked request
// (and a connection slot) until its timeout. While parked, a watcher peeks
// at the connection: a client never sends while it waits for an answer, so
// a read that ends means the client is gone.
func (s *Server) park(conn net.Conn, br *bufio.Reader, wait time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if _, err := br.Peek(1); err != nil && !errors.Is(err, errDeadline) {
			cancel()
		}
	}()
	err := call(ctx)
	conn.SetReadDeadline(longAgo) // stop the watcher
	<-watched
	conn.SetReadDeadline(time.Time{})
	return err
}

func boolUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
