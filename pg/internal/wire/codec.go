package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// AppendUint64 appends v, little-endian.
func AppendUint64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// AppendBytes appends a uint32 length and then p.
func AppendBytes(b []byte, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// AppendString appends a uint32 length and then s.
func AppendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// Decoder reads fields written by the Append functions from a payload. The
// first failure sticks: later reads return zero values and Err reports it,
// so a caller checks once at the end.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder decodes p.
func NewDecoder(p []byte) *Decoder { return &Decoder{b: p} }

func (d *Decoder) fail(what string, need int) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated payload reading %s (need %d bytes, have %d)", pg.ErrComm, what, need, len(d.b))
	}
	d.b = nil
}

// Uint64 reads a little-endian uint64.
func (d *Decoder) Uint64() uint64 {
	if len(d.b) < 8 {
		d.fail("uint64", 8)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// Bytes reads a length-prefixed byte string. The result aliases the payload.
func (d *Decoder) Bytes() []byte {
	if len(d.b) < 4 {
		d.fail("length", 4)
		return nil
	}
	n := binary.LittleEndian.Uint32(d.b)
	if uint64(n) > uint64(len(d.b)-4) {
		d.fail("bytes", int(n))
		return nil
	}
	p := d.b[4 : 4+n : 4+n]
	d.b = d.b[4+n:]
	return p
}

// String reads a length-prefixed string.
func (d *Decoder) String() string { return string(d.Bytes()) }

// Finish returns the first error, or an error if bytes are left over.
func (d *Decoder) Finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d unexpected trailing bytes in payload", pg.ErrComm, len(d.b))
	}
	return d.err
}
