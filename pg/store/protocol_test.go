package store

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

var sampleRequests = []request{
	{op: opSet, keys: []string{"k"}, value: []byte("v")},
	{op: opSet, keys: []string{""}, value: []byte{}},
	{op: opGet, keys: []string{"rank/0"}, wait: 1500 * time.Millisecond},
	{op: opAdd, keys: []string{"n"}, delta: -3},
	{op: opCompareSet, keys: []string{"k"}, value: []byte{}, desired: []byte("d")},
	{op: opWait, keys: []string{"a", "b", "c"}, wait: time.Second},
	{op: opWait, keys: []string{}, wait: 0},
	{op: opDelete, keys: []string{"k"}},
	{op: opNumKeys},
}

func TestRequestRoundTrip(t *testing.T) {
	for _, want := range sampleRequests {
		got, err := decodeRequest(uint8(want.op), want.appendPayload(nil))
		if err != nil {
			t.Fatalf("%v: %v", want.op, err)
		}
		if want.op == opNumKeys {
			want.keys = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %+v, want %+v", got, want)
		}
	}
}

func TestDecodeRequestClampsWait(t *testing.T) {
	payload := wire.AppendUint64(wire.AppendString(nil, "k"), ^uint64(0))
	r, err := decodeRequest(uint8(opGet), payload)
	if err != nil || r.wait != maxWait {
		t.Fatalf("wait = %v, %v; want it clamped to %v", r.wait, err, maxWait)
	}
}

// FuzzDecodeRequest feeds arbitrary requests to the server's decoder. It
// must never panic, every error wraps pg.ErrComm, and a request it accepts
// re-encodes to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range sampleRequests {
		f.Add(uint8(r.op), r.appendPayload(nil))
	}
	f.Add(uint8(opWait), wire.AppendUint64(nil, 1<<62))
	f.Add(uint8(opSet), wire.AppendString(nil, "k")[:3])
	f.Add(uint8(0), []byte{})
	f.Add(uint8(200), []byte("junk"))
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		r, err := decodeRequest(kind, payload)
		if err != nil {
			if !errors.Is(err, pg.ErrComm) {
				t.Fatalf("error %v does not wrap pg.ErrComm", err)
			}
			return
		}
		if r.op != op(kind) {
			t.Fatalf("decoded op %v from kind %d", r.op, kind)
		}
		if r.blocks() && r.wait == maxWait {
			return // clamped: the bytes said more
		}
		if re := r.appendPayload(nil); !bytes.Equal(re, payload) {
			t.Fatalf("accepted %x but re-encodes to %x", payload, re)
		}
	})
}
