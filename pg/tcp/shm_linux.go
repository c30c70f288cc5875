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
	"slices"
	"strconv"
	"strings"
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

func shmKey(rank int) string    { return "tcp/shm/" + strconv.Itoa(rank) }
func shmMapKey(rank int) string { return "tcp/shmmap/" + strconv.Itoa(rank) }

// bootID identifies this boot of this host's kernel.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// setupShm maps the segments of the ranks that share this host with this
// rank, and returns the group's host layout when the group spans hosts
// and some host has several ranks (the layout the hierarchical AllReduce
// follows, shm_hier.go). It returns a nil world, the rank then moving all
// its data over TCP, when no rank shares its host, or when shared memory
// is switched off or fails.
//
// Each rank creates an anonymous memfd segment and listens on an
// abstract Unix socket with a random name, which it publishes with its
// host's identity: the boot id (and, in this package's tests, a label
// that splits the host). A rank connects to the socket of each peer with
// the same identity, proves it holds the job's secret with the same HMAC
// handshake as the TCP connections, and only then receives the peer's
// memfd (SCM_RIGHTS). Abstract sockets live in a network namespace and
// the connect only succeeds from the same one, so a container on the
// same node without the namespace falls back to TCP. Once mapped, every
// memfd is closed: the segments exist only as mappings, nothing is left
// in /dev/shm or /proc/<pid>/fd, and the kernel frees them when the last
// process that maps them exits, even by kill -9.
//
// The ranks agree through the store: each publishes which peers'
// segments it mapped, and every rank computes, from the same published
// sets, every host's world (agreeHosts), so the members of a host always
// agree on who shares memory, and every rank knows every host's leader.
// The sockets stay open until every rank has published its set, so no
// rank is left dialing a closed one.
func setupShm(ctx context.Context, st store.Store, o Options, log *zap.Logger) (*shmWorld, *hostLayout, error) {
	if o.Size == 1 {
		return nil, nil, nil
	}
	segs := make([][]byte, o.Size)
	var world *shmWorld
	defer func() {
		if world == nil {
			for _, s := range segs {
				if s != nil {
					unix.Munmap(s)
				}
			}
		}
	}()
	// why says, for the log, why this rank shares memory with fewer ranks
	// than its host holds; host is empty when it shares with none.
	var why error
	host, name := "", ""
	if o.NoSharedMemory || o.LinkBytesPerSec > 0 {
		why = errors.New("shared memory switched off (Options.NoSharedMemory or LinkBytesPerSec)")
	} else {
		n, ln, fd, err := shmListen(o, segs)
		boot := bootID()
		switch {
		case err != nil:
			why = err
		case boot == "":
			why = errors.New("no boot id")
		default:
			host, name = boot, n
			if o.hostLabel != "" {
				host += "/" + o.hostLabel
			}
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
	}
	info := ""
	if host != "" {
		info = host + " " + name
	}
	if err := st.Set(ctx, shmKey(o.Rank), []byte(info)); err != nil {
		return nil, nil, connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("publishing the shared-memory socket: %w", err))
	}
	hosts := make([]string, o.Size)
	names := make([]string, o.Size)
	for j := range o.Size {
		if j == o.Rank {
			hosts[j] = host
			continue
		}
		v, err := st.Get(ctx, shmKey(j))
		if err != nil {
			return nil, nil, connectErr(o, j, storeKind(err), fmt.Errorf("reading rank %d's shared-memory socket: %w", j, err))
		}
		if i := bytes.LastIndexByte(v, ' '); i > 0 {
			hosts[j], names[j] = string(v[:i]), string(v[i+1:])
		}
	}
	mapped := make([][]int, o.Size)
	if host != "" {
		for j := range o.Size {
			if j == o.Rank || hosts[j] != host {
				continue
			}
			m, err := shmDial(ctx, names[j], o)
			if err != nil {
				if why == nil {
					why = fmt.Errorf("mapping rank %d's segment: %w", j, err)
				}
				continue
			}
			segs[j] = m
			mapped[o.Rank] = append(mapped[o.Rank], j)
		}
		if err := st.Set(ctx, shmMapKey(o.Rank), []byte(formatRanks(mapped[o.Rank]))); err != nil {
			return nil, nil, connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("publishing the mapped segments: %w", err))
		}
	}
	for j := range o.Size {
		if j == o.Rank || hosts[j] == "" {
			continue
		}
		v, err := st.Get(ctx, shmMapKey(j))
		if err != nil {
			return nil, nil, connectErr(o, j, storeKind(err), fmt.Errorf("reading which segments rank %d mapped: %w", j, err))
		}
		mapped[j] = parseRanks(string(v), o.Size)
	}
	groups := agreeHosts(hosts, mapped)
	var mine []int
	for _, h := range groups {
		if slices.Contains(h, o.Rank) {
			mine = h
		}
	}
	var layout *hostLayout
	if len(groups) > 1 && slices.ContainsFunc(groups, func(h []int) bool { return len(h) > 1 }) {
		layout = newHostLayout(groups, o.Rank)
	}
	if why == nil && host != "" {
		for j := range o.Size {
			if hosts[j] == host && !slices.Contains(mine, j) {
				why = fmt.Errorf("rank %d is on this host, but not every rank of it could map its segment", j)
				break
			}
		}
	}
	var viaShm, viaTCP []int
	for j := range o.Size {
		switch {
		case j == o.Rank:
		case len(mine) > 1 && slices.Contains(mine, j):
			viaShm = append(viaShm, j)
		default:
			viaTCP = append(viaTCP, j)
		}
	}
	fields := []zap.Field{zap.Ints("shm", viaShm), zap.Ints("tcp", viaTCP), zap.Int("hosts", len(groups))}
	if layout != nil {
		fields = append(fields, zap.Ints("leaders", layout.leaders))
	}
	if why != nil {
		fields = append(fields, zap.NamedError("why", why))
	}
	log.Info("link transports", fields...)
	if len(mine) < 2 {
		return nil, layout, nil
	}
	for j, s := range segs {
		if s != nil && !slices.Contains(mine, j) {
			unix.Munmap(s)
			segs[j] = nil
		}
	}
	world = &shmWorld{segs: segs, members: mine}
	world.unmap = func() {
		for _, s := range segs {
			if s != nil {
				unix.Munmap(s)
			}
		}
	}
	return world, layout, nil
}

// formatRanks and parseRanks write and read a list of ranks as the store
// holds it: "1,3,4". parseRanks drops anything that is not a rank of a
// group of size n.
func formatRanks(rs []int) string {
	b := make([]byte, 0, 4*len(rs))
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r), 10)
	}
	return string(b)
}

func parseRanks(s string, n int) []int {
	var rs []int
	for f := range strings.SplitSeq(s, ",") {
		if r, err := strconv.Atoi(f); err == nil && r >= 0 && r < n {
			rs = append(rs, r)
		}
	}
	return rs
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
