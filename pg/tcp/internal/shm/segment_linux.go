//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg/internal/shedlog"
	"github.com/goddp/ddp/pg/internal/wire"
)

// A rank's segment: made, served to authenticated peers, and mapped.

// listen creates and maps this rank's segment and listens on a fresh
// abstract Unix socket.
func listen(c Config, segs [][]byte) (string, *net.UnixListener, int, error) {
	fd, err := unix.MemfdCreate("goddp-pg-tcp", unix.MFD_CLOEXEC)
	if err != nil {
		return "", nil, -1, fmt.Errorf("memfd_create: %w", err)
	}
	size := SegBytes + c.arenaBytes()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return "", nil, -1, fmt.Errorf("sizing the segment: %w", err)
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return "", nil, -1, fmt.Errorf("mapping the segment: %w", err)
	}
	segs[c.Rank] = m
	var nonce [16]byte
	rand.Read(nonce[:])
	name := "@goddp-pg-tcp-" + hex.EncodeToString(nonce[:])
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		unix.Close(fd)
		return "", nil, -1, fmt.Errorf("listening on an abstract Unix socket: %w", err)
	}
	return name, ln, fd, nil
}

// refusalInterval is how often, at most, refused connections are
// summarised, as the store's DefaultWarnInterval.
const refusalInterval = 10 * time.Second

// serve hands fd to every connection that passes the handshake, until
// ln is closed. Refusals are rate-limited as the store's (Note
// [rate-limited refusals] in pg/internal/shedlog).
func serve(ln *net.UnixListener, fd int, cfg Config) {
	refused := shedlog.New(cfg.Logger, "shared memory: ", refusalInterval)
	defer refused.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
			if _, err := wire.ServerHandshake(c, cfg.Secret); err != nil {
				refused.Note("it failed the shared-secret handshake", ln.Addr().String(), err)
				return
			}
			c.WriteMsgUnix([]byte{1}, unix.UnixRights(fd), nil)
		}()
	}
}

// dial connects to a peer's socket, authenticates and maps the memfd
// it receives.
func dial(ctx context.Context, name string, cfg Config) ([]byte, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	c.SetDeadline(handshakeDeadline(ctx, cfg.HandshakeTimeout))
	if err := wire.ClientHandshake(c, cfg.Secret, cfg.Hello); err != nil {
		return nil, err
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("no segment received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("no segment received (%v)", err)
	}
	defer unix.Close(fds[0])
	var stt unix.Stat_t
	if err := unix.Fstat(fds[0], &stt); err != nil {
		return nil, err
	}
	// The slots, then an arena of whole pages, if any (Note [buffers
	// peers read in place]).
	if arena := stt.Size - SegBytes; arena < 0 || arena > MaxArenaBytes || arena%arenaAlign != 0 {
		return nil, fmt.Errorf("the segment is %d bytes, want %d and an arena of whole pages up to %d bytes", stt.Size,
			SegBytes, int64(MaxArenaBytes))
	}
	return unix.Mmap(fds[0], 0, int(stt.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// handshakeDeadline is d from now, or ctx's deadline if sooner.
func handshakeDeadline(ctx context.Context, d time.Duration) time.Time {
	t := time.Now().Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Before(t) {
		return cd
	}
	return t
}
