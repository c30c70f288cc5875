package wire

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/goddp/ddp/pg"
)

// HeaderSize is the size of an encoded Header.
const HeaderSize = 20

// DefaultMaxPayload caps a frame's payload unless a caller sets its own.
const DefaultMaxPayload = 64 << 20

// Header precedes every frame's payload. Kind's meaning belongs to the
// protocol using the frame (store or process group); Seq and Tag let a
// receiver match a frame to the collective and step it belongs to.
type Header struct {
	Kind  uint8
	Flags uint8
	Seq   uint64
	Tag   uint32
	Len   uint32
}

// frameMagic guards against a peer speaking another protocol.
const frameMagic = 0xDD

// Put encodes h into b, which must hold HeaderSize bytes.
func (h Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = frameMagic
	b[1] = h.Kind
	b[2] = h.Flags
	b[3] = 0
	binary.LittleEndian.PutUint64(b[4:], h.Seq)
	binary.LittleEndian.PutUint32(b[12:], h.Tag)
	binary.LittleEndian.PutUint32(b[16:], h.Len)
}

// ParseHeader decodes b, rejecting a bad magic byte, a nonzero reserved
// byte, or a payload longer than maxPayload.
func ParseHeader(b []byte, maxPayload uint32) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: frame header of %d bytes, want %d", pg.ErrComm, len(b), HeaderSize)
	}
	if b[0] != frameMagic || b[3] != 0 {
		return Header{}, fmt.Errorf(
			"%w: corrupt frame header (bad magic %#x or reserved byte %#x); is the peer a goddp process of the same version?",
			pg.ErrComm, b[0], b[3])
	}
	h := Header{
		Kind:  b[1],
		Flags: b[2],
		Seq:   binary.LittleEndian.Uint64(b[4:]),
		Tag:   binary.LittleEndian.Uint32(b[12:]),
		Len:   binary.LittleEndian.Uint32(b[16:]),
	}
	if h.Len > maxPayload {
		return Header{}, fmt.Errorf("%w: frame payload of %d bytes exceeds the cap of %d", pg.ErrComm, h.Len, maxPayload)
	}
	return h, nil
}

// ReadHeader reads and parses one header from r.
func ReadHeader(r io.Reader, buf *[HeaderSize]byte, maxPayload uint32) (Header, error) {
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return Header{}, err
	}
	return ParseHeader(buf[:], maxPayload)
}

// WriteFrame writes a header and payload with one writev where the
// connection supports it.
func WriteFrame(w io.Writer, h Header, payload []byte) error {
	var hb [HeaderSize]byte
	h.Len = uint32(len(payload))
	h.Put(hb[:])
	if len(payload) == 0 {
		_, err := w.Write(hb[:])
		return err
	}
	bufs := netBuffers(hb[:], payload)
	_, err := bufs.WriteTo(w)
	return err
}
