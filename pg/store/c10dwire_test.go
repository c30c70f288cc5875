package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// TestC10dProbeLayout: a 1.x server reads the probe's bytes 1 to 8 as the
// length of a SET key. The top bit must be set, so that allocating it
// throws at once (std::vector's length_error) instead of attempting
// gigabytes, and nothing is stored.
func TestC10dProbeLayout(t *testing.T) {
	b := c10dProbe()
	if b[0] != c10dValidate || binary.LittleEndian.Uint32(b[1:5]) != c10dMagic {
		t.Fatalf("the probe does not open with VALIDATE and the magic: % x", b[:5])
	}
	if n := binary.LittleEndian.Uint64(b[1:9]); n < 1<<63 {
		t.Fatalf("a 1.x server would read a key length of %d from the probe; want >= 2^63", n)
	}
	// As a 2.x server reads it: GETNUMKEYS, GETNUMKEYS, CHECK of probeKeys keys, nothing after.
	rest := b[5:]
	if rest[0] != 7 || rest[1] != 7 || rest[2] != 5 {
		t.Fatalf("2.x queries % x, want GETNUMKEYS GETNUMKEYS CHECK", rest[:3])
	}
	if n := binary.LittleEndian.Uint64(rest[3:11]); n != probeKeys || len(rest) != 11+8*probeKeys {
		t.Fatalf("CHECK of %d keys in %d bytes", n, len(rest))
	}
}

// TestC10dRequestEncoding pins the bytes of each request in both
// protocols, as TCPStore.cpp writes them.
func TestC10dRequestEncoding(t *testing.T) {
	str := func(s string) []byte { return appendC10dString(nil, s) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	for _, tc := range []struct {
		req    c10dRequest
		v1, v2 byte
		args   []byte
	}{
		{c10dRequest{op: c10dSet, keys: []string{"k"}, value: []byte("vv")}, 0, 1, cat(str("k"), str("vv"))},
		{c10dRequest{op: c10dCompareSet, keys: []string{"k"}, value: []byte("a"), desired: []byte("b")}, 1, 2,
			cat(str("k"), str("a"), str("b"))},
		{c10dRequest{op: c10dGet, keys: []string{"k"}}, 2, 3, str("k")},
		{c10dRequest{op: c10dAdd, keys: []string{"k"}, delta: -2}, 3, 4, cat(str("k"), u64(^uint64(1)))},
		{c10dRequest{op: c10dCheck, keys: []string{"a", "bc"}}, 4, 5, cat(u64(2), str("a"), str("bc"))},
		{c10dRequest{op: c10dWait, keys: []string{"a"}}, 5, 6, cat(u64(1), str("a"))},
		{c10dRequest{op: c10dNumKeys}, 6, 7, nil},
		{c10dRequest{op: c10dDelete, keys: []string{"k"}}, 8, 8, str("k")},
	} {
		for _, p := range []struct {
			proto C10dProtocol
			code  byte
		}{{C10dV1, tc.v1}, {C10dV2, tc.v2}} {
			got := appendC10dRequest(nil, p.proto, tc.req)
			want := append([]byte{p.code}, tc.args...)
			if !bytes.Equal(got, want) {
				t.Errorf("%v in %v: % x, want % x", tc.req.op, p.proto, got, want)
			}
		}
	}
}

// FuzzC10dAnswer: whatever a server sends, decoding never panics, never
// allocates past the cap, and a decoded answer re-encodes to the bytes
// read.
func FuzzC10dAnswer(f *testing.F) {
	f.Add(uint8(c10dGet), appendC10dBytes(nil, []byte("value")))
	f.Add(uint8(c10dCompareSet), binary.LittleEndian.AppendUint64(nil, 1<<62))
	f.Add(uint8(c10dAdd), binary.LittleEndian.AppendUint64(nil, 42))
	f.Add(uint8(c10dDelete), binary.LittleEndian.AppendUint64(nil, 7))
	f.Add(uint8(c10dNumKeys), []byte{1, 2, 3})
	f.Add(uint8(c10dCheck), []byte{1})
	f.Add(uint8(c10dWait), []byte{9})
	f.Add(uint8(200), []byte{})
	f.Fuzz(func(t *testing.T, op uint8, data []byte) {
		const max = 1 << 10
		r := bytes.NewReader(data)
		d := c10dDecoder{r: r, max: max}
		a, err := d.readAnswer(c10dOp(op))
		if err != nil {
			if !errors.Is(err, pg.ErrComm) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
				!errors.Is(err, pg.ErrInvalidArgument) {
				t.Fatalf("error %v wraps neither pg.ErrComm nor io.EOF", err)
			}
			return
		}
		read := data[:len(data)-r.Len()]
		var again []byte
		switch c10dOp(op) {
		case c10dGet, c10dCompareSet:
			if len(a.value) > max {
				t.Fatalf("decoded %d bytes past the cap %d", len(a.value), max)
			}
			again = appendC10dBytes(nil, a.value)
		case c10dAdd, c10dNumKeys, c10dDelete:
			again = binary.LittleEndian.AppendUint64(nil, uint64(a.n))
		case c10dCheck:
			again = []byte{c10dNotReady}
			if a.ready {
				again = []byte{c10dReady}
			}
		case c10dWait:
			again = []byte{c10dStopWaiting}
		case c10dSet:
		}
		if !bytes.Equal(again, read) {
			t.Fatalf("%v: decoded %+v from % x, which encodes as % x", c10dOp(op), a, read, again)
		}
	})
}

// hostile is a server that answers every connection with script(n, conn),
// n counting connections from 0.
func hostile(t *testing.T, script func(n int, conn net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for n := 0; ; n++ {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, conn)
			go script(n, conn)
		}
	}()
	return l.Addr().String()
}

// TestC10dHostileServer: bad answers become errors that wrap pg.ErrComm
// (or a timeout), never a panic, a hang or a giant allocation.
func TestC10dHostileServer(t *testing.T) {
	reply := func(b []byte) func(int, net.Conn) {
		return func(_ int, conn net.Conn) {
			buf := make([]byte, 4096)
			for {
				if _, err := conn.Read(buf); err != nil {
					return
				}
				conn.Write(b)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		script func(int, net.Conn)
		want   error
	}{
		{"huge value", reply(binary.LittleEndian.AppendUint64(nil, 1<<62)), pg.ErrComm},
		{"half an integer", reply([]byte{1, 2, 3}), pg.ErrComm},
		{"bad wait answer", reply([]byte{7}), pg.ErrComm},
		{"hang up", func(_ int, conn net.Conn) { conn.Close() }, pg.ErrComm},
		{"silence", func(_ int, conn net.Conn) { io.Copy(io.Discard, conn) }, pg.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := hostile(t, tc.script)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := DialC10d(ctx, addr, C10dOptions{Protocol: C10dV1, Timeout: 300 * time.Millisecond, MaxValue: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			calls := map[string]func(context.Context) error{
				"Get":        func(ctx context.Context) error { _, err := c.Get(ctx, "k"); return err },
				"Add":        func(ctx context.Context) error { _, err := c.Add(ctx, "k", 1); return err },
				"CompareSet": func(ctx context.Context) error { _, err := c.CompareSet(ctx, "k", nil, []byte("x")); return err },
				"NumKeys":    func(ctx context.Context) error { _, err := c.NumKeys(ctx); return err },
				"Delete":     func(ctx context.Context) error { _, err := c.Delete(ctx, "k"); return err },
				"Wait":       func(ctx context.Context) error { return c.Wait(ctx, "k") },
				"Set":        func(ctx context.Context) error { return c.Set(ctx, "k", []byte("v")) },
			}
			failed := 0
			for name, call := range calls {
				short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
				start := time.Now()
				err := call(short)
				cancelShort()
				if time.Since(start) > 2*time.Second {
					t.Errorf("%s took %v", name, time.Since(start))
				}
				if err == nil {
					continue // some garbage reads as a valid answer to some ops
				}
				failed++
				var te *TimeoutError
				switch {
				case errors.As(err, &te):
					if len(te.Keys) != 1 || te.Keys[0] != "k" {
						t.Errorf("%s: timeout %v does not name the key", name, err)
					}
				case errors.Is(err, pg.ErrComm), errors.Is(err, pg.ErrTimeout), errors.Is(err, pg.ErrInvalidArgument):
					if !strings.Contains(err.Error(), "c10d") {
						t.Errorf("%s: %q does not say it came from the c10d store", name, err)
					}
				default:
					t.Errorf("%s: %v; want an error wrapping pg.ErrComm or pg.ErrTimeout", name, err)
				}
			}
			if failed == 0 {
				t.Fatalf("no call failed against a server that %s", tc.name)
			}
		})
	}
}

// TestC10dDetectNeither: a server that is no c10d store (it sends banner
// bytes) is refused at dial with an error that says so; one that drops
// every connection likewise.
func TestC10dDetectNeither(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(int, net.Conn)
	}{
		{"banner", func(_ int, conn net.Conn) { conn.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n")); io.Copy(io.Discard, conn) }},
		{"drops all", func(_ int, conn net.Conn) { conn.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := hostile(t, tc.script)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err := DialC10d(ctx, addr, C10dOptions{})
			if err == nil {
				c.Close()
				t.Fatal("DialC10d accepted a server that is not a c10d store")
			}
			if !errors.Is(err, pg.ErrComm) || !strings.Contains(err.Error(), "c10d TCPStore") {
				t.Fatalf("err = %v; want pg.ErrComm asking whether it is a c10d TCPStore", err)
			}
		})
	}
}

// TestC10dDialTimeout: nobody listening is retried until the deadline,
// then named.
func TestC10dDialTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = DialC10d(context.Background(), addr, C10dOptions{Timeout: 200 * time.Millisecond})
	if !errors.Is(err, pg.ErrTimeout) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v; want pg.ErrTimeout naming %s", err, addr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("DialC10d took %v with a 200ms timeout", d)
	}
}

// FuzzC10dServerBytes: a server that answers every connection with the
// fuzzer's bytes. Detecting the protocol and every call end, in time, with
// a result or an error; nothing panics.
func FuzzC10dServerBytes(f *testing.F) {
	f.Add(append(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 3), 3), c10dNotReady))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<63))
	f.Add([]byte{c10dStopWaiting, 5, 0, 0, 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		addr := hostile(t, func(_ int, conn net.Conn) {
			conn.Write(data)
			io.Copy(io.Discard, conn)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := DialC10d(ctx, addr, C10dOptions{Timeout: 100 * time.Millisecond, MaxValue: 1 << 16})
		if err != nil {
			return
		}
		defer c.Close()
		if p := c.Protocol(); p != C10dV1 && p != C10dV2 {
			t.Fatalf("detected %v", p)
		}
		start := time.Now()
		bg := context.Background() // the client's 100ms timeout bounds each call
		c.Get(bg, "k")
		c.Add(bg, "k", 1)
		c.CompareSet(bg, "k", []byte("a"), []byte("b"))
		c.Wait(bg, "k", "j")
		c.Check(bg, "k")
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Fatalf("five calls with a 100ms timeout took %v", d)
		}
	})
}
