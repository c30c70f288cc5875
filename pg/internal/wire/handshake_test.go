package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

var (
	secretA = []byte("0123456789abcdef-job-secret-A")
	secretB = []byte("0123456789abcdef-job-secret-B")
)

// pipe returns two connected in-memory conns with a deadline, so a
// handshake bug fails the test instead of hanging it.
func pipe(t *testing.T) (server, client net.Conn) {
	t.Helper()
	server, client = net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	server.SetDeadline(deadline)
	client.SetDeadline(deadline)
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

type result struct {
	hello []byte
	err   error
}

// handshake runs both sides concurrently and returns their results.
func handshake(t *testing.T, serverSecret, clientSecret, hello []byte) (result, error) {
	t.Helper()
	s, c := pipe(t)
	done := make(chan result, 1)
	go func() {
		h, err := ServerHandshake(s, serverSecret)
		if err != nil {
			s.Close() // as a real server would, so the client is not left waiting
		}
		done <- result{h, err}
	}()
	cerr := ClientHandshake(c, clientSecret, hello)
	if cerr != nil {
		c.Close()
	}
	return <-done, cerr
}

func TestHandshakeSuccess(t *testing.T) {
	for _, hello := range [][]byte{nil, []byte("rank=3 purpose=store"), bytes.Repeat([]byte{7}, MaxHello)} {
		srv, cerr := handshake(t, secretA, secretA, hello)
		if srv.err != nil || cerr != nil {
			t.Fatalf("hello of %d bytes: server err %v, client err %v", len(hello), srv.err, cerr)
		}
		if !bytes.Equal(srv.hello, hello) {
			t.Fatalf("server got hello %q, want %q", srv.hello, hello)
		}
	}
}

func TestHandshakeWrongSecretRefusedOnBothSides(t *testing.T) {
	srv, cerr := handshake(t, secretA, secretB, []byte("impostor"))
	if !errors.Is(srv.err, pg.ErrUnauthenticated) {
		t.Errorf("server: err = %v, want pg.ErrUnauthenticated", srv.err)
	}
	if srv.hello != nil {
		t.Errorf("server returned hello %q from an unauthenticated peer", srv.hello)
	}
	if !errors.Is(cerr, pg.ErrUnauthenticated) {
		t.Errorf("client: err = %v, want pg.ErrUnauthenticated", cerr)
	}
}

// An impostor server that answers "accepted" without knowing the secret
// must be caught by the client's check of the server MAC.
func TestHandshakeClientRefusesImpostorServer(t *testing.T) {
	s, c := pipe(t)
	go func() {
		var greet [4 + 1 + nonceSize]byte
		copy(greet[:], magic[:])
		greet[4] = version
		s.Write(greet[:])
		io.ReadFull(s, make([]byte, nonceSize+4+len("hi")+macSize))
		s.Write(append([]byte{0}, make([]byte, macSize)...))
	}()
	err := ClientHandshake(c, secretA, []byte("hi"))
	if !errors.Is(err, pg.ErrUnauthenticated) {
		t.Fatalf("err = %v, want pg.ErrUnauthenticated", err)
	}
}

func TestHandshakeClientRefusesForeignProtocol(t *testing.T) {
	s, c := pipe(t)
	go s.Write([]byte("SSH-2.0-OpenSSH_9.6 hello there, friend\r\n"))
	if err := ClientHandshake(c, secretA, nil); !errors.Is(err, pg.ErrUnauthenticated) {
		t.Fatalf("err = %v, want pg.ErrUnauthenticated", err)
	}
}

// failRW fails the test if a handshake touches the connection.
type failRW struct{ t *testing.T }

func (f failRW) Read([]byte) (int, error)  { f.t.Error("unexpected Read"); return 0, io.EOF }
func (f failRW) Write([]byte) (int, error) { f.t.Error("unexpected Write"); return 0, io.EOF }

func TestHandshakeShortSecret(t *testing.T) {
	for _, secret := range [][]byte{nil, []byte("short"), secretA[:MinSecret-1]} {
		if _, err := ServerHandshake(failRW{t}, secret); !errors.Is(err, ErrNoSecret) {
			t.Errorf("server with %d-byte secret: err = %v, want ErrNoSecret", len(secret), err)
		}
		if err := ClientHandshake(failRW{t}, secret, nil); !errors.Is(err, ErrNoSecret) {
			t.Errorf("client with %d-byte secret: err = %v, want ErrNoSecret", len(secret), err)
		}
	}
}

func TestHandshakeClientRefusesOversizedHello(t *testing.T) {
	err := ClientHandshake(failRW{t}, secretA, make([]byte, MaxHello+1))
	if !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("err = %v, want pg.ErrInvalidArgument", err)
	}
}

// clientHead is the start of a client's handshake message: a nonce and a
// hello length.
func clientHead(helloLen uint32) []byte {
	return binary.LittleEndian.AppendUint32(make([]byte, nonceSize), helloLen)
}

func TestServerHandshakeRefusesBadHello(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		cause error // also wrapped, besides pg.ErrUnauthenticated; nil if none
	}{
		{"nothing", nil, io.EOF},
		{"truncated head", clientHead(3)[:10], io.ErrUnexpectedEOF},
		{"truncated hello", append(clientHead(10), "abc"...), io.ErrUnexpectedEOF},
		{"hello without MAC", append(clientHead(2), "ab"...), io.ErrUnexpectedEOF},
		{"oversized hello", clientHead(MaxHello + 1), nil},
		{"4 GiB hello", clientHead(^uint32(0)), nil},
		{"wrong MAC", append(append(clientHead(2), "ab"...), make([]byte, macSize)...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rw := &scripted{in: bytes.NewReader(tt.input)}
			hello, err := ServerHandshake(rw, secretA)
			if !errors.Is(err, pg.ErrUnauthenticated) || hello != nil {
				t.Fatalf("ServerHandshake = %q, %v; want pg.ErrUnauthenticated", hello, err)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Fatalf("err = %v, want it to wrap %v too", err, tt.cause)
			}
			checkNotAccepted(t, rw.out.Bytes())
		})
	}
}

// scripted is a connection whose peer sends fixed bytes; what the handshake
// writes is kept in out.
type scripted struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (s *scripted) Read(p []byte) (int, error)  { return s.in.Read(p) }
func (s *scripted) Write(p []byte) (int, error) { return s.out.Write(p) }

// checkNotAccepted checks that a server wrote its greeting and then at most
// the refusal byte: never the accepting status and MAC.
func checkNotAccepted(t *testing.T, out []byte) {
	t.Helper()
	const greet = 4 + 1 + nonceSize
	if len(out) < greet || [4]byte(out[:4]) != magic || out[4] != version {
		t.Fatalf("server greeting %x is malformed", out)
	}
	if rest := out[greet:]; len(rest) > 1 || (len(rest) == 1 && rest[0] != 1) {
		t.Fatalf("server wrote %x after its greeting to an unauthenticated peer", rest)
	}
}

// FuzzServerHandshake feeds arbitrary client bytes to ServerHandshake. It
// must never panic, never accept (the fuzzer cannot know the per-connection
// nonce, let alone the secret), and never send the accepting reply.
func FuzzServerHandshake(f *testing.F) {
	signed := func(secret, hello []byte) []byte {
		// A well-formed message signed over an all-zero server nonce: right
		// shape, wrong nonce, so the server must still refuse it.
		b := append(clientHead(uint32(len(hello))), hello...)
		return append(b, mac(secret, "client", make([]byte, nonceSize), make([]byte, nonceSize), hello)...)
	}
	f.Add(signed(secretA, []byte("rank=1")))
	f.Add(signed(secretB, nil))
	f.Add(clientHead(MaxHello + 1))
	f.Add(append(clientHead(5), "abc"...))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := &scripted{in: bytes.NewReader(in)}
		hello, err := ServerHandshake(rw, secretA)
		if err == nil {
			t.Fatalf("accepted a peer without the secret; hello %q", hello)
		}
		if !errors.Is(err, pg.ErrUnauthenticated) {
			t.Fatalf("err = %v, want pg.ErrUnauthenticated", err)
		}
		checkNotAccepted(t, rw.out.Bytes())
	})
}

// FuzzClientHandshake feeds arbitrary server bytes to ClientHandshake: it
// must never panic and never trust a server that cannot prove the secret.
func FuzzClientHandshake(f *testing.F) {
	greet := append(append([]byte{}, magic[:]...), version)
	greet = append(greet, make([]byte, nonceSize)...)
	f.Add(append(append(append([]byte{}, greet...), 0), make([]byte, macSize)...))
	f.Add(append(append([]byte{}, greet...), 1))
	f.Add(greet[:7])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := &scripted{in: bytes.NewReader(in)}
		err := ClientHandshake(rw, secretA, []byte("hello"))
		if !errors.Is(err, pg.ErrUnauthenticated) {
			t.Fatalf("err = %v, want pg.ErrUnauthenticated", err)
		}
	})
}
