package store_test

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/store/storetest"
)

// fakeC10d is a small c10d TCPStore server written from TCPStoreBackend.cpp,
// for tests that must run without torch (the Example, the suite in CI
// machines without python3-torch). It speaks one protocol generation; a
// 2.x one drops connections that do not open with VALIDATE. The real
// servers are tested in c10d_torch_test.go.
type fakeC10d struct {
	l     net.Listener
	proto store.C10dProtocol
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	kv      map[string][]byte
	changed chan struct{} // closed and replaced on every write
	conns   map[net.Conn]struct{}
}

// startFakeC10d serves a fresh store on loopback until closed.
func startFakeC10d(proto store.C10dProtocol) (*fakeC10d, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &fakeC10d{l: l, proto: proto, done: make(chan struct{}), kv: map[string][]byte{},
		changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[conn] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(conn) })
		}
	})
	return s, nil
}

func (s *fakeC10d) Addr() string { return s.l.Addr().String() }

func (s *fakeC10d) Close() {
	close(s.done)
	s.l.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// code maps a query byte to the op name.
func (s *fakeC10d) op(b byte) string {
	names := []string{"set", "compareSet", "get", "add", "check", "wait", "numKeys", "watch", "delete"}
	if s.proto == store.C10dV2 {
		names = []string{"validate", "set", "compareSet", "get", "add", "check", "wait", "numKeys", "delete"}
	}
	if int(b) < len(names) {
		return names[b]
	}
	return ""
}

func (s *fakeC10d) serve(conn net.Conn) {
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	var b [8]byte
	u64 := func() (uint64, bool) {
		if _, err := io.ReadFull(conn, b[:8]); err != nil {
			return 0, false
		}
		return binary.LittleEndian.Uint64(b[:8]), true
	}
	str := func() ([]byte, bool) {
		n, ok := u64()
		if !ok || n > 1<<20 {
			return nil, false
		}
		p := make([]byte, n)
		_, err := io.ReadFull(conn, p)
		return p, err == nil
	}
	keys := func() ([]string, bool) {
		n, ok := u64()
		if !ok || n > 1<<10 {
			return nil, false
		}
		out := make([]string, n)
		for i := range out {
			k, ok := str()
			if !ok {
				return nil, false
			}
			out[i] = string(k)
		}
		return out, true
	}
	send := func(p []byte) bool { _, err := conn.Write(p); return err == nil }
	sendBytes := func(p []byte) bool {
		return send(append(binary.LittleEndian.AppendUint64(nil, uint64(len(p))), p...))
	}
	sendInt := func(n int64) bool { return send(binary.LittleEndian.AppendUint64(nil, uint64(n))) }
	for first := true; ; first = false {
		if _, err := io.ReadFull(conn, b[:1]); err != nil {
			return
		}
		op := s.op(b[0])
		if s.proto == store.C10dV2 && first != (op == "validate") {
			return // 2.x: VALIDATE first, and only first
		}
		switch op {
		case "validate":
			if _, err := io.ReadFull(conn, b[:4]); err != nil || binary.LittleEndian.Uint32(b[:4]) != 0x3C85F7CE {
				return
			}
		case "set":
			k, ok1 := str()
			v, ok2 := str()
			if !ok1 || !ok2 {
				return
			}
			s.write(string(k), v)
		case "compareSet":
			k, ok1 := str()
			exp, ok2 := str()
			des, ok3 := str()
			if !ok1 || !ok2 || !ok3 {
				return
			}
			s.mu.Lock()
			cur, present := s.kv[string(k)]
			res := cur
			switch {
			case !present && len(exp) == 0, present && string(cur) == string(exp):
				res = des
				s.kv[string(k)] = des
				close(s.changed)
				s.changed = make(chan struct{})
			case !present:
				res = exp
			}
			s.mu.Unlock()
			if !sendBytes(res) {
				return
			}
		case "get":
			k, ok := str()
			s.mu.Lock()
			v, present := s.kv[string(k)]
			s.mu.Unlock()
			if !ok || !present || !sendBytes(v) { // c10d drops a get of a missing key
				return
			}
		case "add":
			k, ok1 := str()
			d, ok2 := u64()
			if !ok1 || !ok2 {
				return
			}
			s.mu.Lock() // read, add and write atomically, as the server's one thread does
			cur, present := s.kv[string(k)]
			n, err := int64(0), error(nil)
			if present {
				n, err = strconv.ParseInt(string(cur), 10, 64)
			}
			if err == nil {
				n += int64(d)
				s.kv[string(k)] = []byte(strconv.FormatInt(n, 10))
				close(s.changed)
				s.changed = make(chan struct{})
			}
			s.mu.Unlock()
			if err != nil {
				return // std::stoll throws: the connection is dropped
			}
			if !sendInt(n) {
				return
			}
		case "check", "wait":
			ks, ok := keys()
			if !ok {
				return
			}
			for {
				s.mu.Lock()
				all, changed := true, s.changed
				for _, k := range ks {
					if _, present := s.kv[k]; !present {
						all = false
					}
				}
				s.mu.Unlock()
				if all || op == "check" {
					r := byte(0)
					if !all {
						r = 1
					}
					if !send([]byte{r}) {
						return
					}
					break
				}
				select {
				case <-changed:
				case <-s.done:
					return
				case <-time.After(50 * time.Millisecond): // notice a client that hung up
					conn.SetReadDeadline(time.Now().Add(time.Millisecond))
					_, err := conn.Read(b[:0])
					conn.SetReadDeadline(time.Time{})
					if err != nil && !isTimeout(err) {
						return
					}
				}
			}
		case "numKeys":
			s.mu.Lock()
			n := len(s.kv)
			s.mu.Unlock()
			if !sendInt(int64(n)) {
				return
			}
		case "delete":
			k, ok := str()
			if !ok {
				return
			}
			s.mu.Lock()
			_, present := s.kv[string(k)]
			delete(s.kv, string(k))
			s.mu.Unlock()
			n := int64(0)
			if present {
				n = 1
			}
			if !sendInt(n) {
				return
			}
		default:
			return
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func (s *fakeC10d) write(k string, v []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv[k] = v
	close(s.changed)
	s.changed = make(chan struct{})
}

// TestC10dFakeSuite runs the store suite through the c10d client against
// the fake server in both protocols, so the client is covered where torch
// is not installed; detection must pick the server's protocol.
func TestC10dFakeSuite(t *testing.T) {
	for _, proto := range []store.C10dProtocol{store.C10dV1, store.C10dV2} {
		t.Run(proto.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
				srv, err := startFakeC10d(proto)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Close)
				return func() store.Store {
					c := dialC10d(t, srv.Addr(), timeout)
					if c.Protocol() != proto {
						t.Fatalf("detected %v against a %v server", c.Protocol(), proto)
					}
					return c
				}
			})
		})
	}
}
