package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/goddp/ddp/pg"
)

const (
	nonceSize = 32
	macSize   = sha256.Size
	version   = 1
	// MaxHello caps the hello a dialer sends in the handshake.
	MaxHello = 1024
	// MinSecret is the shortest secret accepted.
	MinSecret = 16

	greetingSize = 4 + 1 + nonceSize
)

var magic = [4]byte{'G', 'D', 'D', 'P'}

// ErrNoSecret is returned when a handshake is attempted without a secret.
var ErrNoSecret = errors.New("wire: no shared secret: every goddp job needs one of at least 16 bytes; launchers " +
	"generate it and pass it in GODDP_SECRET")

func checkSecret(secret []byte) error {
	if len(secret) < MinSecret {
		return ErrNoSecret
	}
	return nil
}

func mac(secret []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// ServerHandshake runs the accepting side on rw and returns the dialer's
// hello once its MAC checks. The caller sets a deadline on the connection
// first. A failed check wraps pg.ErrUnauthenticated and the connection
// must be closed.
func ServerHandshake(rw io.ReadWriter, secret []byte) (hello []byte, err error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	var greet [greetingSize]byte
	copy(greet[:], magic[:])
	greet[4] = version
	serverNonce := greet[5:]
	if _, err := rand.Read(serverNonce); err != nil {
		return nil, err
	}
	if _, err := rw.Write(greet[:]); err != nil {
		return nil, err
	}
	var head [nonceSize + 4]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		return nil, fmt.Errorf("%w: reading handshake: %w", pg.ErrUnauthenticated, err)
	}
	clientNonce := head[:nonceSize]
	n := binary.LittleEndian.Uint32(head[nonceSize:])
	if n > MaxHello {
		return nil, fmt.Errorf("%w: hello of %d bytes exceeds %d", pg.ErrUnauthenticated, n, MaxHello)
	}
	rest := make([]byte, int(n)+macSize)
	if _, err := io.ReadFull(rw, rest); err != nil {
		return nil, fmt.Errorf("%w: reading handshake: %w", pg.ErrUnauthenticated, err)
	}
	hello, got := rest[:n], rest[n:]
	if !hmac.Equal(got, mac(secret, "client", serverNonce, clientNonce, hello)) {
		rw.Write([]byte{1}) // best effort: tell the dialer it was refused
		return nil, fmt.Errorf("%w: handshake MAC mismatch (the peer does not hold this job's secret)", pg.ErrUnauthenticated)
	}
	reply := append([]byte{0}, mac(secret, "server", clientNonce, serverNonce)...)
	if _, err := rw.Write(reply); err != nil {
		return nil, err
	}
	return hello, nil
}

// ClientHandshake runs the dialing side on rw, sending hello. It checks the
// server's MAC too, so a dialer never talks to an impostor.
func ClientHandshake(rw io.ReadWriter, secret, hello []byte) error {
	return clientHandshake(rw, secret, hello, func() {})
}

// clientHandshake is ClientHandshake, calling greeted once the server's
// greeting has been read.
func clientHandshake(rw io.ReadWriter, secret, hello []byte, greeted func()) error {
	if err := checkSecret(secret); err != nil {
		return err
	}
	if len(hello) > MaxHello {
		return fmt.Errorf("%w: hello of %d bytes exceeds %d", pg.ErrInvalidArgument, len(hello), MaxHello)
	}
	var greet [greetingSize]byte
	if _, err := io.ReadFull(rw, greet[:]); err != nil {
		return fmt.Errorf("%w: reading server greeting: %w", pg.ErrUnauthenticated, err)
	}
	if [4]byte(greet[:4]) != magic || greet[4] != version {
		return fmt.Errorf("%w: server greeting is not goddp version %d", pg.ErrUnauthenticated, version)
	}
	greeted()
	serverNonce := greet[5:]
	msg := make([]byte, nonceSize, nonceSize+4+len(hello)+macSize)
	if _, err := rand.Read(msg); err != nil {
		return err
	}
	clientNonce := msg[:nonceSize]
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(hello)))
	msg = append(msg, hello...)
	msg = append(msg, mac(secret, "client", serverNonce, clientNonce, hello)...)
	if _, err := rw.Write(msg); err != nil {
		return err
	}
	var reply [1 + macSize]byte
	if _, err := io.ReadFull(rw, reply[:1]); err != nil {
		return fmt.Errorf("%w: reading handshake reply: %w", pg.ErrUnauthenticated, err)
	}
	if reply[0] != 0 {
		return fmt.Errorf("%w: refused by the server: this process does not hold the job's secret", pg.ErrUnauthenticated)
	}
	if _, err := io.ReadFull(rw, reply[1:]); err != nil {
		return fmt.Errorf("%w: reading handshake reply: %w", pg.ErrUnauthenticated, err)
	}
	if !hmac.Equal(reply[1:], mac(secret, "server", clientNonce, serverNonce)) {
		return fmt.Errorf("%w: server failed to prove it holds the job's secret", pg.ErrUnauthenticated)
	}
	return nil
}
