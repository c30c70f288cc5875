//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package store

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// sentBytes reports whether bytes from the peer wait unread on conn,
// asking the kernel without reading them or waiting: the handshake's
// goroutine may not have run since they arrived. It uses Control, not
// Read, which would wait for the goroutine blocked reading conn.
func sentBytes(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	return n > 0
}
