package tcp

import (
	"errors"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// failure is why a group stopped working. The first one wins; every
// collective pending or issued afterwards fails with it, each under its
// own op name.
type failure struct {
	kind   error // a pg sentinel: ErrTimeout, ErrComm, ErrRemote, ...
	peer   int   // the rank to blame, or pg.NoPeer
	err    error // the cause
	origin error // the sentinel of the failure this one relays; nil means kind
}

func (f *failure) errorFor(op string, rank int) error {
	return &pg.CollectiveError{Op: op, Rank: rank, Peer: f.peer, Kind: f.kind, Err: f.err}
}

// failureOf turns a collective's error into the group's failure.
func failureOf(op string, seq uint64, err error) *failure {
	var mr *pg.MissingRanksError
	if errors.As(err, &mr) && len(mr.Missing) > 0 {
		return &failure{kind: pg.ErrTimeout, peer: mr.Missing[0], err: fmt.Errorf("%s #%d: %w", op, seq, err)}
	}
	var ce *pg.CollectiveError
	if errors.As(err, &ce) {
		cause := ce.Err
		if cause == nil {
			cause = ce.Kind
		}
		return &failure{kind: ce.Kind, peer: ce.Peer, err: fmt.Errorf("%s #%d failed: %w", op, seq, cause)}
	}
	return &failure{kind: pg.ErrComm, peer: pg.NoPeer, err: fmt.Errorf("%s #%d failed: %w", op, seq, err)}
}

// kindCode numbers the sentinels for the abort frame. 0 is unknown.
func kindCode(kind error) uint64 {
	for i, k := range sentinels() {
		if kind == k {
			return uint64(i + 1)
		}
	}
	return 0
}

func kindOf(code uint64) error {
	s := sentinels()
	if code == 0 || code > uint64(len(s)) {
		return pg.ErrRemote
	}
	return s[code-1]
}

func sentinels() []error {
	return []error{pg.ErrTimeout, pg.ErrComm, pg.ErrRemote, pg.ErrAborted, pg.ErrClosed, pg.ErrMismatch,
		pg.ErrInvalidArgument, pg.ErrUnauthenticated}
}

// maxControl caps the payload of a control frame (hello, abort).
const maxControl = 64 << 10

// encodeAbort is the payload of the abort (or relay) frame a failing rank
// sends to every peer: whom it blames, the kind of the original failure,
// and the message.
func encodeAbort(f *failure) []byte {
	peer := int64(f.peer)
	b := wire.AppendUint64(nil, uint64(peer))
	origin := f.origin
	if origin == nil {
		origin = f.kind
	}
	b = wire.AppendUint64(b, kindCode(origin))
	msg := fmt.Sprint(f.err)
	if len(msg) > maxControl/2 {
		msg = msg[:maxControl/2]
	}
	return wire.AppendString(b, msg)
}

// decodeAbort turns an abort frame from rank sender into this rank's
// failure: a remote error that blames the rank the sender blamed, or the
// sender itself when it blamed nobody (or us), so that errors name the
// rank at the root of the failure. errors.Is matches the original kind too.
func decodeAbort(p []byte, sender, self, size int) (*failure, error) {
	d := wire.NewDecoder(p)
	peer := int64(d.Uint64())
	code := d.Uint64()
	msg := d.String()
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("abort frame: %w", err)
	}
	blame := int(peer)
	if peer < 0 || peer >= int64(size) || blame == self {
		blame = sender
	}
	return &failure{
		kind:   pg.ErrRemote,
		peer:   blame,
		err:    fmt.Errorf("rank %d failed: %w: %s", sender, kindOf(code), msg),
		origin: kindOf(code),
	}, nil
}
