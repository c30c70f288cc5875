package store

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/goddp/ddp/pg"
)

// c10d's TCPStore wire protocol, as PyTorch's TCPStore.cpp and
// TCPStoreBackend.cpp / TCPStoreLibUvBackend.cpp speak it. A request is a
// one-byte query type followed by its arguments; strings and byte vectors
// are a uint64 length then the bytes; integers are 8 bytes. Everything is
// little-endian (c10d sends its native byte order; every platform PyTorch
// supports is little-endian). There is no framing: a reader must know what
// each answer looks like.
//
//	set:        key, value                 (no answer)
//	compareSet: key, expected, desired  -> value
//	get:        key                     -> value (the key must exist: wait first)
//	add:        key, int64 delta        -> int64 sum
//	check:      uint64 n, n keys        -> uint8 READY (0) or NOT_READY (1)
//	wait:       uint64 n, n keys        -> uint8 STOP_WAITING (0) once all exist
//	numKeys:                            -> int64
//	delete:     key                     -> int64 (1 if it existed)
//
// The two protocol generations differ in the query type numbers and in
// the opening: 2.x servers expect every connection to begin with VALIDATE
// (query type 0) and the uint32 magic 0x3C85F7CE, and drop or ignore a
// connection that does not; in 1.x, query type 0 is SET.
type c10dOp uint8

const (
	c10dSet c10dOp = iota
	c10dCompareSet
	c10dGet
	c10dAdd
	c10dCheck
	c10dWait
	c10dNumKeys
	c10dDelete
	c10dNumOps
)

var c10dOpNames = [c10dNumOps]string{"set", "compareSet", "get", "add", "check", "wait", "numKeys", "delete"}

func (o c10dOp) String() string {
	if o < c10dNumOps {
		return c10dOpNames[o]
	}
	return fmt.Sprintf("c10dOp(%d)", uint8(o))
}

// c10dCodes maps an op to its query type byte in each protocol. 1.x:
// SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, WATCH_KEY,
// DELETE_KEY (PyTorch 1.13). 2.x: VALIDATE, SET, COMPARE_SET, GET, ADD,
// CHECK, WAIT, GETNUMKEYS, DELETE_KEY, APPEND, ...
var c10dCodes = [...][c10dNumOps]uint8{
	C10dV1: {0, 1, 2, 3, 4, 5, 6, 8},
	C10dV2: {1, 2, 3, 4, 5, 6, 7, 8},
}

const (
	c10dValidate      = 0          // 2.x: the query type that opens a connection
	c10dMagic         = 0x3C85F7CE // 2.x: validationMagicNumber
	c10dReady         = 0          // CheckResponseType::READY
	c10dNotReady      = 1          // CheckResponseType::NOT_READY
	c10dStopWaiting   = 0          // WaitResponseType::STOP_WAITING
	c10dMaxKey        = 8 << 10    // the libuv server's MAX_STRING_LEN
	c10dMaxPayload    = 8 << 20    // the libuv server's MAX_PAYLOAD_LEN
	c10dMaxWaitKeys   = 128 << 10  // the libuv server's MAX_KEY_COUNT
	defaultC10dMaxVal = 64 << 20   // default cap on a value read back
)

// c10dRequest is one query, encoded for protocol p.
type c10dRequest struct {
	op      c10dOp
	keys    []string // one key, or check's and wait's keys
	value   []byte   // set's value, compareSet's expected
	desired []byte   // compareSet's desired
	delta   int64    // add
}

func appendC10dString(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
}

func appendC10dBytes(b []byte, p []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(p))), p...)
}

// appendC10dRequest encodes r after b in protocol p.
func appendC10dRequest(b []byte, p C10dProtocol, r c10dRequest) []byte {
	b = append(b, c10dCodes[p][r.op])
	switch r.op {
	case c10dSet:
		b = appendC10dBytes(appendC10dString(b, r.keys[0]), r.value)
	case c10dCompareSet:
		b = appendC10dBytes(appendC10dBytes(appendC10dString(b, r.keys[0]), r.value), r.desired)
	case c10dGet, c10dDelete:
		b = appendC10dString(b, r.keys[0])
	case c10dAdd:
		b = binary.LittleEndian.AppendUint64(appendC10dString(b, r.keys[0]), uint64(r.delta))
	case c10dCheck, c10dWait:
		b = binary.LittleEndian.AppendUint64(b, uint64(len(r.keys)))
		for _, k := range r.keys {
			b = appendC10dString(b, k)
		}
	case c10dNumKeys:
	}
	return b
}

// appendC10dValidate appends 2.x's opening: VALIDATE and the magic.
func appendC10dValidate(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(append(b, c10dValidate), c10dMagic)
}

// checkC10dRequest refuses what a c10d server would refuse or choke on,
// before anything is sent: keys and values over the libuv server's limits.
func checkC10dRequest(r c10dRequest) error {
	if len(r.keys) > c10dMaxWaitKeys {
		return fmt.Errorf("%w: store: c10d %v of %d keys; a c10d server takes at most %d", pg.ErrInvalidArgument, r.op,
			len(r.keys), c10dMaxWaitKeys)
	}
	for _, k := range r.keys {
		if len(k) > c10dMaxKey {
			return fmt.Errorf("%w: store: c10d %v: key of %d bytes (%q...); a c10d server takes keys of at most %d bytes",
				pg.ErrInvalidArgument, r.op, len(k), k[:32], c10dMaxKey)
		}
	}
	for _, v := range [][]byte{r.value, r.desired} {
		if len(v) > c10dMaxPayload {
			return fmt.Errorf("%w: store: c10d %v %q: value of %d bytes; a c10d server takes values of at most %d bytes",
				pg.ErrInvalidArgument, r.op, r.keys, len(v), c10dMaxPayload)
		}
	}
	return nil
}

// c10dDecoder reads a server's answers. Every method is safe on any byte
// stream: a length over max is refused before anything is allocated, and
// every failure wraps pg.ErrComm (or is the reader's own error, such as
// io.EOF or a timeout, for the caller to explain).
type c10dDecoder struct {
	r   io.Reader
	max uint64 // the longest value accepted
	buf [8]byte
}

func (d *c10dDecoder) int64() (int64, error) {
	if _, err := io.ReadFull(d.r, d.buf[:8]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(d.buf[:8])), nil
}

func (d *c10dDecoder) uint8() (uint8, error) {
	if _, err := io.ReadFull(d.r, d.buf[:1]); err != nil {
		return 0, err
	}
	return d.buf[0], nil
}

func (d *c10dDecoder) bytes() ([]byte, error) {
	if _, err := io.ReadFull(d.r, d.buf[:8]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(d.buf[:8])
	if n > d.max {
		return nil, fmt.Errorf("%w: the server sent a value of %d bytes, over the cap of %d (C10dOptions.MaxValue)",
			pg.ErrComm, n, d.max)
	}
	b, err := readFrame(d.r, int(n), unlimited) // as it arrives: n is the server's claim
	return b, err
}

// c10dAnswer is a decoded answer: n for add, numKeys and delete; ready
// for check and wait; value for get and compareSet.
type c10dAnswer struct {
	n     int64
	ready bool
	value []byte
}

// readAnswer reads the answer to one request of op o.
func (d *c10dDecoder) readAnswer(o c10dOp) (c10dAnswer, error) {
	var a c10dAnswer
	var err error
	switch o {
	case c10dSet:
	case c10dGet, c10dCompareSet:
		a.value, err = d.bytes()
	case c10dAdd, c10dNumKeys, c10dDelete:
		a.n, err = d.int64()
		if err == nil && o != c10dAdd && (a.n < 0 || (o == c10dDelete && a.n > 1)) {
			err = fmt.Errorf("%w: the server answered %v with %d", pg.ErrComm, o, a.n)
		}
	case c10dCheck:
		var b uint8
		if b, err = d.uint8(); err == nil {
			switch b {
			case c10dReady:
				a.ready = true
			case c10dNotReady:
			default:
				err = fmt.Errorf("%w: the server answered check with %d, neither READY nor NOT_READY", pg.ErrComm, b)
			}
		}
	case c10dWait:
		var b uint8
		if b, err = d.uint8(); err == nil {
			if b != c10dStopWaiting {
				err = fmt.Errorf("%w: the server answered wait with %d, not STOP_WAITING", pg.ErrComm, b)
			}
			a.ready = err == nil
		}
	default:
		err = fmt.Errorf("%w: store: no answer format for %v", pg.ErrInvalidArgument, o)
	}
	return a, err
}
