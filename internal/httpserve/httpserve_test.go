package httpserve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// short are limits a test can wait out.
func short() Limits {
	return Limits{ReadHeader: 300 * time.Millisecond, Read: time.Second, Write: 500 * time.Millisecond,
		Idle: 300 * time.Millisecond, MaxHeaderBytes: 4 << 10, MaxConns: 2}
}

func start(t *testing.T, addr string, h http.Handler, l Limits) *Server {
	t.Helper()
	srv, err := Start(context.Background(), addr, h, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func ok(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok", Loopback(r)) }

// closedWithin reads c until the server closes it, and fails unless that
// happens within d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	start := time.Now()
	_, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("%s: still open after %v (%v)", what, time.Since(start).Round(time.Millisecond), err)
	}
}

// A client that sends half its headers and stops (slowloris) is cut off
// at ReadHeader, and one that idles on a keep-alive connection at Idle.
func TestSlowAndIdleClientsCutOff(t *testing.T) {
	srv := start(t, "127.0.0.1:0", http.HandlerFunc(ok), short())
	slow, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprint(slow, "GET / HTTP/1.1\r\nHost: x\r\n")
	closedWithin(t, slow, 3*time.Second, "a connection with half its headers")

	idle, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	closedWithin(t, idle, 3*time.Second, "an idle keep-alive connection")
}

// Headers beyond MaxHeaderBytes are refused with 431.
func TestHeaderSizeCapped(t *testing.T) {
	srv := start(t, "127.0.0.1:0", http.HandlerFunc(ok), short())
	req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB of headers: %d, want 431", resp.StatusCode)
	}
}

// Beyond MaxConns a connection waits to be served until one of those
// open closes.
func TestConnectionsCapped(t *testing.T) {
	l := short()
	l.Idle, l.ReadHeader = 10*time.Second, 10*time.Second
	srv := start(t, "127.0.0.1:0", http.HandlerFunc(ok), l)
	var held []net.Conn
	for range l.MaxConns {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("connection %d: %v %v", len(held), resp, err)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	fmt.Fprint(extra, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := extra.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("connection %d was served while %d were open (MaxConns)", l.MaxConns+1, l.MaxConns)
	}
	held[0].Close()
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(extra)
	if err != nil || !strings.Contains(string(b), "200 OK") {
		t.Fatalf("once a slot was free: %q %v", b, err)
	}
}

// A client that never reads an endless response is cut off at Write: the
// handler's writes fail and it returns.
func TestUnreadResponseCutOff(t *testing.T) {
	returned := make(chan time.Duration, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		start := time.Now()
		chunk := make([]byte, 64<<10)
		for time.Since(start) < 10*time.Second {
			if _, err := w.Write(chunk); err != nil {
				break
			}
		}
		returned <- time.Since(start)
	})
	srv := start(t, "127.0.0.1:0", h, short())
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case d := <-returned:
		if d > 3*time.Second {
			t.Fatalf("the handler wrote to a client that does not read for %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler still writes to a client that does not read, after 5s")
	}
}

// Loopback is true over 127.0.0.1, false over the machine's own
// non-loopback address, on one server listening on every interface.
func TestLoopback(t *testing.T) {
	ip := nonLoopbackIP(t)
	srv := start(t, ":0", http.HandlerFunc(ok), short())
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for host, want := range map[string]string{"127.0.0.1": "ok true\n", ip: "ok false\n"} {
		resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Errorf("over %s: %q, want %q", host, b, want)
		}
	}
}

// nonLoopbackIP is one of the machine's own addresses that is not
// loopback, or the test is skipped.
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses (%v): cannot reach this machine other than over loopback", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to reach it as a remote client would")
	return ""
}
