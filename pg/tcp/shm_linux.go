//go:build linux

package tcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

const (
	shmSpin = 2000                 // loads before a wait sleeps in the kernel
	shmPoll = 2 * time.Millisecond // the longest futex sleep between checks
)

// Shared (not FUTEX_PRIVATE) futex operations: the word is in a mapping
// other processes share.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

func futexWake(w *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, 1<<30, 0, 0, 0)
}

func futexWait(w *uint32, v uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func shmKey(rank int) string   { return "tcp/shm/" + strconv.Itoa(rank) }
func shmOKKey(rank int) string { return "tcp/shmok/" + strconv.Itoa(rank) }

// bootID identifies this boot of this host's kernel.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// setupShm maps every rank's segment when every rank of the group shares
// this host, and returns nil (the group then moves all data over TCP)
// when any does not, or when shared memory is switched off or fails.
//
// Each rank creates an anonymous memfd segment and listens on an
// abstract Unix socket with a random name, which it publishes with its
// boot id. A rank whose boot id matches connects to each peer's socket,
// proves it holds the job's secret with the same HMAC handshake as the
// TCP connections, and only then receives the peer's memfd (SCM_RIGHTS).
// Abstract sockets live in a network namespace and the connect only
// succeeds from the same one, so a container on the same node without
// the namespace falls back to TCP. Once mapped, every memfd is closed:
// the segments exist only as mappings, nothing is left in /dev/shm or
// /proc/<pid>/fd, and the kernel frees them when the last process that
// maps them exits, even by kill -9. The ranks agree through the store,
// so either all use shared memory or none does.
func setupShm(ctx context.Context, st store.Store, o Options, log *zap.Logger) (*shmWorld, error) {
	if o.Size == 1 {
		return nil, nil
	}
	ok := false
	var segs [][]byte
	defer func() {
		if !ok {
			for _, s := range segs {
				if s != nil {
					unix.Munmap(s)
				}
			}
		}
	}()
	fail := func(why error) {
		log.Info("shared memory not used: links use TCP", zap.Error(why))
	}
	segs = make([][]byte, o.Size)
	if o.NoSharedMemory || o.LinkBytesPerSec > 0 {
		// Say so without waiting for anyone: the peers, reading this,
		// fall back to TCP too.
		for _, k := range []string{shmKey(o.Rank), shmOKKey(o.Rank)} {
			v := ""
			if k == shmOKKey(o.Rank) {
				v = "0"
			}
			if err := st.Set(ctx, k, []byte(v)); err != nil {
				return nil, connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("publishing that shared memory is off: %w", err))
			}
		}
		log.Info("shared memory switched off (Options.NoSharedMemory or LinkBytesPerSec): links use TCP")
		return nil, nil
	}
	name, ln, fd, why := shmListen(o, segs)
	boot := bootID()
	info := ""
	if why == nil && boot != "" {
		info = boot + " " + name
	}
	if err := st.Set(ctx, shmKey(o.Rank), []byte(info)); err != nil {
		return nil, connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("publishing the shared-memory socket: %w", err))
	}
	if ln != nil {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); shmServe(ln, fd, o) }()
		defer func() {
			ln.Close()
			wg.Wait()
			unix.Close(fd)
		}()
	}
	mine := why == nil
	if mine && boot == "" {
		mine, why = false, errors.New("no boot id")
	}
	for j := 0; j < o.Size && mine; j++ {
		if j == o.Rank {
			continue
		}
		v, err := st.Get(ctx, shmKey(j))
		if err != nil {
			return nil, connectErr(o, j, storeKind(err), fmt.Errorf("reading rank %d's shared-memory socket: %w", j, err))
		}
		peerBoot, peerName, _ := strings2(string(v))
		if peerBoot != boot {
			mine, why = false, fmt.Errorf("rank %d is on another host or unavailable", j)
			break
		}
		if segs[j], err = shmDial(ctx, peerName, o); err != nil {
			mine, why = false, fmt.Errorf("mapping rank %d's segment: %w", j, err)
		}
	}
	flag := "0"
	if mine {
		flag = "1"
	}
	if err := st.Set(ctx, shmOKKey(o.Rank), []byte(flag)); err != nil {
		return nil, connectErr(o, pg.NoPeer, storeKind(err), err)
	}
	all := mine
	for j := range o.Size {
		v, err := st.Get(ctx, shmOKKey(j))
		if err != nil {
			return nil, connectErr(o, j, storeKind(err), fmt.Errorf("reading rank %d's shared-memory verdict: %w", j, err))
		}
		if string(v) != "1" {
			if all && why == nil {
				why = fmt.Errorf("rank %d cannot share memory with every rank", j)
			}
			all = false
		}
	}
	if !all {
		fail(why)
		return nil, nil
	}
	ok = true
	log.Info("links use shared memory", zap.Int("ranks", o.Size))
	members := make([]int, o.Size)
	for j := range members {
		members[j] = j
	}
	w := &shmWorld{segs: segs, members: members}
	w.unmap = func() {
		for _, s := range segs {
			unix.Munmap(s)
		}
	}
	return w, nil
}

func strings2(s string) (a, b string, ok bool) {
	i := bytes.IndexByte([]byte(s), ' ')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// shmListen creates and maps this rank's segment and listens on a fresh
// abstract Unix socket.
func shmListen(o Options, segs [][]byte) (string, *net.UnixListener, int, error) {
	fd, err := unix.MemfdCreate("goddp-pg-tcp", unix.MFD_CLOEXEC)
	if err != nil {
		return "", nil, -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, shmSegBytes); err != nil {
		unix.Close(fd)
		return "", nil, -1, fmt.Errorf("sizing the segment: %w", err)
	}
	m, err := unix.Mmap(fd, 0, shmSegBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return "", nil, -1, fmt.Errorf("mapping the segment: %w", err)
	}
	segs[o.Rank] = m
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

// shmServe hands fd to every connection that passes the handshake, until
// ln is closed.
func shmServe(ln *net.UnixListener, fd int, o Options) {
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
			c.SetDeadline(time.Now().Add(handshakeTimeout))
			if _, err := wire.ServerHandshake(c, o.Secret); err != nil {
				o.Logger.Warn("refused a shared-memory connection that failed the handshake", zap.Int("rank", o.Rank), zap.Error(err))
				return
			}
			c.WriteMsgUnix([]byte{1}, unix.UnixRights(fd), nil)
		}()
	}
}

// shmDial connects to a peer's socket, authenticates and maps the memfd
// it receives.
func shmDial(ctx context.Context, name string, o Options) ([]byte, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	c.SetDeadline(handshakeDeadline(ctx))
	if err := wire.ClientHandshake(c, o.Secret, helloOf(o).encode()); err != nil {
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
	if stt.Size != shmSegBytes {
		return nil, fmt.Errorf("the segment is %d bytes, want %d", stt.Size, shmSegBytes)
	}
	return unix.Mmap(fds[0], 0, shmSegBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

const shmSupported = true
