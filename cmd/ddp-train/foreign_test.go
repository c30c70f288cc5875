package main

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Another program on MASTER_PORT, which accepts and never speaks the
// store's protocol (or answers something else): rank 0 cannot host the
// store there, rank 1 reaches that program instead of the store, and
// both fail within seconds, naming the address and saying that something
// else is listening there, not after --timeout (60 s here): wire's Note
// [foreign listener].
func TestForeignListenerOnMasterPort(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer string // written on accepting; "" for none
	}{
		{"silent", ""},
		{"garbage", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var conns []net.Conn
			wg.Go(func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					conns = append(conns, conn) // held open until the test ends
					mu.Unlock()
					conn.Write([]byte(c.answer))
				}
			})
			defer func() {
				ln.Close()
				wg.Wait()
				for _, conn := range conns {
					conn.Close()
				}
			}()
			addr := ln.Addr().String()
			port := ln.Addr().(*net.TCPAddr).Port
			start := time.Now()
			results := runRanksAt(t, 90*time.Second, port, []string{"--timeout", "60s"}, []string{"--timeout", "60s"})
			took := time.Since(start)
			for r, res := range results {
				last := lastLine(res.stderr)
				if res.code == 0 || !strings.Contains(last, "something else is listening there") || !strings.Contains(last, addr) {
					t.Errorf("rank %d: exit %d, last line %q; want a failure naming %s and saying that something else is listening "+
						"there", r, res.code, last, addr)
				}
			}
			if took > 10*time.Second {
				t.Errorf("the ranks took %v to fail; want under 10 s", took)
			}
			t.Logf("both ranks failed after %v; rank 1: %s", took.Round(time.Millisecond), lastLine(results[1].stderr))
		})
	}
}
