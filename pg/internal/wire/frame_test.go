package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

func header(b0, reserved byte, length uint32) []byte {
	b := make([]byte, HeaderSize)
	Header{Kind: 7, Flags: 1, Seq: 1 << 40, Tag: 9, Len: length}.Put(b)
	b[0], b[3] = b0, reserved
	return b
}

func TestParseHeader(t *testing.T) {
	good := header(frameMagic, 0, 100)
	tests := []struct {
		name    string
		b       []byte
		max     uint32
		wantErr bool
	}{
		{"valid", good, 100, false},
		{"longer buffer", append(append([]byte{}, good...), 1, 2, 3), 100, false},
		{"empty", nil, 100, true},
		{"short", good[:HeaderSize-1], 100, true},
		{"bad magic", header(0xAB, 0, 100), 100, true},
		{"reserved byte set", header(frameMagic, 1, 100), 100, true},
		{"over cap", good, 99, true},
		{"max uint32 length", header(frameMagic, 0, ^uint32(0)), DefaultMaxPayload, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader(tt.b, tt.max)
			if tt.wantErr {
				if !errors.Is(err, pg.ErrComm) {
					t.Fatalf("ParseHeader = %+v, %v; want an error wrapping pg.ErrComm", h, err)
				}
				return
			}
			want := Header{Kind: 7, Flags: 1, Seq: 1 << 40, Tag: 9, Len: 100}
			if err != nil || h != want {
				t.Fatalf("ParseHeader = %+v, %v; want %+v", h, err, want)
			}
		})
	}
}

func TestWriteFrameReadHeader(t *testing.T) {
	for _, payload := range [][]byte{nil, {}, []byte("x"), bytes.Repeat([]byte{0xEE}, 70000)} {
		var buf bytes.Buffer
		// Len is set by WriteFrame from the payload, whatever the caller put there.
		if err := WriteFrame(&buf, Header{Kind: 3, Seq: 5, Tag: 6, Len: 12345}, payload); err != nil {
			t.Fatal(err)
		}
		var hb [HeaderSize]byte
		h, err := ReadHeader(&buf, &hb, DefaultMaxPayload)
		if err != nil {
			t.Fatal(err)
		}
		want := Header{Kind: 3, Seq: 5, Tag: 6, Len: uint32(len(payload))}
		if h != want {
			t.Fatalf("header = %+v, want %+v", h, want)
		}
		if got := buf.Bytes(); !bytes.Equal(got, payload) {
			t.Fatalf("payload of %d bytes came back as %d bytes", len(payload), len(got))
		}
	}
}

func TestWriteFrameOverConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	payload := []byte("hello, frame")
	errc := make(chan error, 1)
	go func() { errc <- WriteFrame(a, Header{Kind: 1, Seq: 2}, payload) }()
	var hb [HeaderSize]byte
	h, err := ReadHeader(b, &hb, 64)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, h.Len)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) || h.Seq != 2 || h.Kind != 1 {
		t.Fatalf("got %+v %q", h, got)
	}
}

func TestReadHeaderTruncated(t *testing.T) {
	var hb [HeaderSize]byte
	_, err := ReadHeader(bytes.NewReader(header(frameMagic, 0, 1)[:7]), &hb, 10)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

// FuzzParseHeader: ParseHeader never panics, every error wraps pg.ErrComm,
// and an accepted header respects the cap and re-encodes to the same bytes.
func FuzzParseHeader(f *testing.F) {
	f.Add(header(frameMagic, 0, 10), uint32(10))
	f.Add(header(frameMagic, 0, 11), uint32(10))
	f.Add(header(frameMagic, 2, 0), uint32(10))
	f.Add(header(0, 0, 0), uint32(0))
	f.Add([]byte{frameMagic}, uint32(DefaultMaxPayload))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		h, err := ParseHeader(b, max)
		var hb [HeaderSize]byte
		h2, err2 := ReadHeader(bytes.NewReader(b), &hb, max)
		if err != nil {
			if !errors.Is(err, pg.ErrComm) {
				t.Fatalf("error %v does not wrap pg.ErrComm", err)
			}
			if err2 == nil {
				t.Fatalf("ReadHeader accepted what ParseHeader refused: %+v", h2)
			}
			return
		}
		if err2 != nil || h2 != h {
			t.Fatalf("ReadHeader = %+v, %v; ParseHeader = %+v", h2, err2, h)
		}
		if h.Len > max {
			t.Fatalf("accepted length %d over cap %d", h.Len, max)
		}
		out := make([]byte, HeaderSize)
		h.Put(out)
		if !bytes.Equal(out, b[:HeaderSize]) {
			t.Fatalf("re-encoded %x, parsed from %x", out, b[:HeaderSize])
		}
	})
}
