package store

import (
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// The TCP store protocol. After wire's handshake the client sends request
// frames and the server answers each with one response frame carrying the
// same Seq. A connection has at most one request outstanding; a client
// that wants more opens more connections.
//
// A request's Header.Kind is its op; its payload is the op's fields,
// written with wire's Append functions:
//
//	set:        key, value
//	get:        key, wait ms
//	add:        key, delta (two's complement uint64)
//	compareSet: key, expected, desired
//	wait:       key count, keys..., wait ms
//	delete:     key
//	numKeys:    (nothing)
//
// A response's Header.Kind is a status. An OK payload is the raw value
// (get, compareSet) or a uint64 (add, delete, numKeys); an error payload is
// a message. After statusBadRequest the server closes the connection.
type op uint8

const (
	opSet op = iota + 1
	opGet
	opAdd
	opCompareSet
	opWait
	opDelete
	opNumKeys
)

var opNames = [...]string{opSet: "set", opGet: "get", opAdd: "add", opCompareSet: "compareSet",
	opWait: "wait", opDelete: "delete", opNumKeys: "numKeys"}

func (o op) String() string {
	if o >= opSet && o <= opNumKeys {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

const (
	statusOK         uint8 = iota // the op's result follows
	statusTimeout                 // get or wait: keys were not set in time
	statusInvalid                 // the op was refused (add to a non-integer)
	statusBadRequest              // the request was malformed; the server hangs up
	statusError                   // the op failed on the server for another reason
)

// maxWait caps the wait a request may ask the server for.
const maxWait = 7 * 24 * time.Hour

// request is one decoded store request.
type request struct {
	op      op
	keys    []string      // one key, or wait's keys
	value   []byte        // set's value, compareSet's expected
	desired []byte        // compareSet's desired
	delta   int64         // add
	wait    time.Duration // get and wait: how long the server may park it
}

func (r *request) key() string {
	if len(r.keys) == 0 {
		return ""
	}
	return r.keys[0]
}

// blocks reports whether the server parks the request until keys are set.
func (r *request) blocks() bool { return r.op == opGet || r.op == opWait }

// appendPayload encodes r's fields after the op.
func (r *request) appendPayload(b []byte) []byte {
	switch r.op {
	case opSet:
		b = wire.AppendBytes(wire.AppendString(b, r.key()), r.value)
	case opGet:
		b = wire.AppendUint64(wire.AppendString(b, r.key()), uint64(r.wait.Milliseconds()))
	case opAdd:
		b = wire.AppendUint64(wire.AppendString(b, r.key()), uint64(r.delta))
	case opCompareSet:
		b = wire.AppendString(b, r.key())
		b = wire.AppendBytes(wire.AppendBytes(b, r.value), r.desired)
	case opWait:
		b = wire.AppendUint64(b, uint64(len(r.keys)))
		for _, k := range r.keys {
			b = wire.AppendString(b, k)
		}
		b = wire.AppendUint64(b, uint64(r.wait.Milliseconds()))
	case opDelete:
		b = wire.AppendString(b, r.key())
	}
	return b
}

// decodeRequest decodes an untrusted request. Every failure wraps pg.ErrComm.
func decodeRequest(kind uint8, payload []byte) (request, error) {
	r := request{op: op(kind)}
	d := wire.NewDecoder(payload)
	switch r.op {
	case opSet:
		r.keys, r.value = []string{d.String()}, d.Bytes()
	case opGet:
		r.keys, r.wait = []string{d.String()}, waitOf(d.Uint64())
	case opAdd:
		r.keys, r.delta = []string{d.String()}, int64(d.Uint64())
	case opCompareSet:
		r.keys, r.value, r.desired = []string{d.String()}, d.Bytes(), d.Bytes()
	case opWait:
		n := d.Uint64()
		if n > uint64(len(payload)/4) { // every key takes at least 4 bytes
			return r, fmt.Errorf("%w: store: wait request claims %d keys in %d bytes", pg.ErrComm, n, len(payload))
		}
		r.keys = make([]string, n)
		for i := range r.keys {
			r.keys[i] = d.String()
		}
		r.wait = waitOf(d.Uint64())
	case opDelete:
		r.keys = []string{d.String()}
	case opNumKeys:
	default:
		return r, fmt.Errorf("%w: store: unknown request %v", pg.ErrComm, r.op)
	}
	if err := d.Finish(); err != nil {
		return r, fmt.Errorf("store: bad %v request: %w", r.op, err)
	}
	return r, nil
}

func waitOf(ms uint64) time.Duration {
	if ms > uint64(maxWait.Milliseconds()) {
		return maxWait
	}
	return time.Duration(ms) * time.Millisecond
}
