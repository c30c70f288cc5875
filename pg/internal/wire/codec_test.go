package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestDecoderRoundTrip(t *testing.T) {
	var b []byte
	b = AppendUint64(b, 42)
	b = AppendString(b, "key")
	b = AppendBytes(b, nil)
	b = AppendBytes(b, []byte{0, 1, 2})
	b = AppendUint64(b, ^uint64(0))

	d := NewDecoder(b)
	u, s, e, p, m := d.Uint64(), d.String(), d.Bytes(), d.Bytes(), d.Uint64()
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if u != 42 || s != "key" || len(e) != 0 || !bytes.Equal(p, []byte{0, 1, 2}) || m != ^uint64(0) {
		t.Fatalf("decoded %v %q %v %v %v", u, s, e, p, m)
	}
}

func TestDecoderErrors(t *testing.T) {
	hugeLen := binary.LittleEndian.AppendUint32(nil, ^uint32(0))
	tests := []struct {
		name    string
		payload []byte
		read    func(d *Decoder)
	}{
		{"short uint64", []byte{1, 2, 3}, func(d *Decoder) { d.Uint64() }},
		{"short length", []byte{1, 2}, func(d *Decoder) { d.Bytes() }},
		{"length past end", append(binary.LittleEndian.AppendUint32(nil, 5), 'a', 'b'), func(d *Decoder) { _ = d.String() }},
		{"length 4 GiB", append(hugeLen, 'a'), func(d *Decoder) { d.Bytes() }},
		{"trailing bytes", append(AppendUint64(nil, 1), 0), func(d *Decoder) { d.Uint64() }},
		{"read past empty", nil, func(d *Decoder) { d.Uint64() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(tt.payload)
			tt.read(d)
			if err := d.Finish(); !errors.Is(err, pg.ErrComm) {
				t.Fatalf("Finish = %v, want an error wrapping pg.ErrComm", err)
			}
		})
	}
}

func TestDecoderErrorSticks(t *testing.T) {
	b := AppendUint64(nil, 7)
	b = AppendString(b, "after")
	d := NewDecoder(b[:4]) // too short for the uint64
	if v := d.Uint64(); v != 0 {
		t.Fatalf("Uint64 on a short payload = %d, want 0", v)
	}
	first := d.Finish()
	if s := d.String(); s != "" {
		t.Fatalf("String after a failure = %q, want empty", s)
	}
	if err := d.Finish(); err != first {
		t.Fatalf("Finish changed from %v to %v; the first error must stick", first, err)
	}
}

func TestDecoderBytesCannotClobberPayload(t *testing.T) {
	b := AppendBytes(nil, []byte("ab"))
	b = AppendString(b, "cd")
	d := NewDecoder(b)
	p := d.Bytes()
	_ = append(p, 'X', 'X', 'X', 'X', 'X', 'X', 'X', 'X') // must reallocate, not write into b
	if s := d.String(); s != "cd" {
		t.Fatalf("next field = %q after appending to the previous one; want \"cd\"", s)
	}
}

// FuzzDecoder runs a program of reads (ops, one per byte) over payload. It
// must never panic, every error wraps pg.ErrComm, and a payload that decodes
// cleanly re-encodes to exactly the same bytes.
func FuzzDecoder(f *testing.F) {
	ok := AppendString(AppendUint64(nil, 3), "k")
	f.Add([]byte{0, 1}, ok)
	f.Add([]byte{1, 1, 1}, AppendBytes(AppendBytes(AppendBytes(nil, nil), []byte{9}), []byte("zz")))
	f.Add([]byte{2}, append(binary.LittleEndian.AppendUint32(nil, 1<<31), 'x'))
	f.Add([]byte{0}, []byte{1, 2, 3})
	f.Add([]byte{}, []byte{0})
	f.Fuzz(func(t *testing.T, ops, payload []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		d := NewDecoder(payload)
		var re []byte
		for _, op := range ops {
			switch op % 3 {
			case 0:
				re = AppendUint64(re, d.Uint64())
			case 1:
				re = AppendBytes(re, d.Bytes())
			case 2:
				re = AppendString(re, d.String())
			}
		}
		err := d.Finish()
		if err != nil {
			if !errors.Is(err, pg.ErrComm) {
				t.Fatalf("error %v does not wrap pg.ErrComm", err)
			}
			return
		}
		if !bytes.Equal(re, payload) {
			t.Fatalf("decoded cleanly but re-encodes to %x, not %x", re, payload)
		}
	})
}
