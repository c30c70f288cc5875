//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// Supported reports whether this platform has the shared-memory
// transport.
const Supported = true

// The store keys under which a rank publishes its host and socket, and
// the ranks whose segments it mapped.
func sockKey(rank int) string { return "tcp/shm/" + strconv.Itoa(rank) }
func mapKey(rank int) string  { return "tcp/shmmap/" + strconv.Itoa(rank) }

// bootID identifies this boot of this host's kernel.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// netNamespace identifies this process's network namespace
// ("net:[4026531833]"), or is "" where /proc does not say.
func netNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	return ns
}

// hostIdentity is what this rank publishes as its host: the boot id and
// the network namespace, since a peer's abstract socket can be reached
// only from its own namespace (two Kubernetes pods on one node share a
// boot id but not a namespace), and the label the caller gave.
func hostIdentity(label string) string {
	id := bootID()
	if id == "" {
		return ""
	}
	if ns := netNamespace(); ns != "" {
		id += "/" + ns
	}
	if label != "" {
		id += "/" + label
	}
	return id
}

// Setup maps the segments of the ranks that share this host with this
// rank, and returns the group's host layout when the group spans hosts
// and some host has several ranks (the layout the hierarchical AllReduce
// follows). It returns a nil World, the rank then moving all its data
// over TCP, when no rank shares its host, or when shared memory is
// switched off or fails. Its errors are *StoreError.
//
// Each rank creates an anonymous memfd segment and listens on an
// abstract Unix socket with a random name, which it publishes with its
// host's identity: the boot id, the network namespace (and
// Config.HostLabel). A rank connects
// to the socket of each peer with the same identity, proves it holds the
// job's secret with the same HMAC handshake as pg/tcp's connections, and
// only then receives the peer's memfd (SCM_RIGHTS). Abstract sockets
// live in a network namespace and the connect only succeeds from the
// same one, so a container on the same node without the namespace falls
// back to TCP. Once mapped, every memfd is closed: the segments exist
// only as mappings, nothing is left in /dev/shm or /proc/<pid>/fd, and
// the kernel frees them when the last process that maps them exits, even
// by kill -9.
//
// The ranks agree through the store: each publishes which peers'
// segments it mapped, and every rank computes, from the same published
// sets, every host's world (agreeHosts), so the members of a host always
// agree on who shares memory, and every rank knows every host's leader.
// The sockets stay open until every rank has published its set, so no
// rank is left dialing a closed one.
func Setup(ctx context.Context, st store.Store, c Config) (*World, *Layout, error) {
	if c.Size == 1 {
		return nil, nil, nil
	}
	s := &setup{c: c, segs: make([][]byte, c.Size), why: c.Off}
	defer s.unmapUnkept()
	if c.Off == nil {
		stop := s.listen()
		defer stop() // after every rank published what it mapped
	}
	if err := s.exchangeSockets(ctx, st); err != nil {
		return nil, nil, err
	}
	if err := s.mapPeers(ctx, st); err != nil {
		return nil, nil, err
	}
	if err := s.readMapped(ctx, st); err != nil {
		return nil, nil, err
	}
	hosts := agreeHosts(s.hosts, s.mapped)
	mine := hostOf(hosts, c.Rank)
	layout := newLayout(hosts, c.Rank)
	s.explain(mine)
	s.logTransports(mine, hosts, layout)
	if len(mine) < 2 {
		return nil, layout, nil
	}
	return s.keep(mine), layout, nil
}

// setup is Setup's state between its steps.
type setup struct {
	c    Config
	segs [][]byte // mapped so far, by rank
	kept bool     // segs belong to a World

	host, name   string   // this rank's host identity ("" when it shares with no one) and socket
	hosts, names []string // every rank's, as published
	mapped       [][]int  // by rank, the ranks whose segments it mapped
	// why says, for the log, why this rank shares memory with fewer
	// ranks than its host holds.
	why error
}

// listen creates and maps this rank's segment and serves it on a fresh
// abstract socket until the returned function is called. On failure it
// records why, and this rank shares memory with no one.
func (s *setup) listen() (stop func()) {
	name, ln, fd, err := listen(s.c, s.segs)
	host := hostIdentity(s.c.HostLabel)
	switch {
	case err != nil:
		s.why = err
	case host == "":
		s.why = errors.New("no boot id")
	default:
		s.host, s.name = host, name
	}
	if ln == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); serve(ln, fd, s.c) }()
	return func() {
		ln.Close()
		wg.Wait()
		unix.Close(fd)
	}
}

// exchangeSockets publishes this rank's host and socket ("" when it
// shares memory with no one) and reads every peer's.
func (s *setup) exchangeSockets(ctx context.Context, st store.Store) error {
	info := ""
	if s.host != "" {
		info = s.host + " " + s.name
	}
	if err := st.Set(ctx, sockKey(s.c.Rank), []byte(info)); err != nil {
		return &StoreError{Peer: pg.NoPeer, Err: fmt.Errorf("publishing the shared-memory socket: %w", err)}
	}
	s.hosts, s.names = make([]string, s.c.Size), make([]string, s.c.Size)
	for j := range s.c.Size {
		if j == s.c.Rank {
			s.hosts[j] = s.host
			continue
		}
		v, err := st.Get(ctx, sockKey(j))
		if err != nil {
			return &StoreError{Peer: j, Err: fmt.Errorf("reading rank %d's shared-memory socket: %w", j, err)}
		}
		if i := bytes.LastIndexByte(v, ' '); i > 0 {
			s.hosts[j], s.names[j] = string(v[:i]), string(v[i+1:])
		}
	}
	return nil
}

// mapPeers maps the segment of every peer that published this rank's
// host, and publishes which it mapped. A peer that fails is left out,
// and the first failure recorded as why.
func (s *setup) mapPeers(ctx context.Context, st store.Store) error {
	me := s.c.Rank
	s.mapped = make([][]int, s.c.Size)
	if s.host == "" {
		return nil
	}
	for j := range s.c.Size {
		if j == me || s.hosts[j] != s.host {
			continue
		}
		m, err := dial(ctx, s.names[j], s.c)
		if err != nil {
			if s.why == nil {
				s.why = fmt.Errorf("mapping rank %d's segment: %w", j, err)
			}
			continue
		}
		s.segs[j] = m
		s.mapped[me] = append(s.mapped[me], j)
	}
	if err := st.Set(ctx, mapKey(me), []byte(formatRanks(s.mapped[me]))); err != nil {
		return &StoreError{Peer: pg.NoPeer, Err: fmt.Errorf("publishing the mapped segments: %w", err)}
	}
	return nil
}

// readMapped reads which segments every peer that shares memory with
// anyone mapped.
func (s *setup) readMapped(ctx context.Context, st store.Store) error {
	for j := range s.c.Size {
		if j == s.c.Rank || s.hosts[j] == "" {
			continue
		}
		v, err := st.Get(ctx, mapKey(j))
		if err != nil {
			return &StoreError{Peer: j, Err: fmt.Errorf("reading which segments rank %d mapped: %w", j, err)}
		}
		s.mapped[j] = parseRanks(string(v), s.c.Size)
	}
	return nil
}

// hostOf is the world in hosts that holds rank.
func hostOf(hosts [][]int, rank int) []int {
	for _, h := range hosts {
		if slices.Contains(h, rank) {
			return h
		}
	}
	return nil
}

// explain records, when no reason is known yet, that a rank of this host
// was left out of this rank's world.
func (s *setup) explain(mine []int) {
	if s.why != nil || s.host == "" {
		return
	}
	for j := range s.c.Size {
		if s.hosts[j] == s.host && !slices.Contains(mine, j) {
			s.why = fmt.Errorf("rank %d is on this host, but not every rank of it could map its segment", j)
			return
		}
	}
}

// logTransports logs which peers this rank reaches through shared memory
// and which over TCP, and why it shares with fewer than its host holds.
func (s *setup) logTransports(mine []int, hosts [][]int, layout *Layout) {
	var viaShm, viaTCP []int
	for j := range s.c.Size {
		switch {
		case j == s.c.Rank:
		case len(mine) > 1 && slices.Contains(mine, j):
			viaShm = append(viaShm, j)
		default:
			viaTCP = append(viaTCP, j)
		}
	}
	fields := []zap.Field{zap.Ints("shm", viaShm), zap.Ints("tcp", viaTCP), zap.Int("hosts", len(hosts))}
	if layout != nil {
		fields = append(fields, zap.Ints("leaders", layout.Leaders))
	}
	if s.why != nil {
		fields = append(fields, zap.NamedError("why", s.why))
	}
	s.c.Logger.Info("link transports", fields...)
}

// keep unmaps the segments of ranks outside mine and makes the world of
// the rest.
func (s *setup) keep(mine []int) *World {
	for j, m := range s.segs {
		if m != nil && !slices.Contains(mine, j) {
			unix.Munmap(m)
			s.segs[j] = nil
		}
	}
	s.kept = true
	return &World{segs: s.segs, members: mine, me: s.c.Rank, arena: newArena(s.segs[s.c.Rank][SegBytes:])}
}

// unmapUnkept unmaps every segment unless a World holds them.
func (s *setup) unmapUnkept() {
	if !s.kept {
		unmapAll(s.segs)
	}
}

func unmapAll(segs [][]byte) {
	for _, m := range segs {
		if m != nil {
			unix.Munmap(m)
		}
	}
}

// releasePages gives b's memory back to the kernel; b reads as zeros
// after. b is in a shared mapping of a memfd (an arena).
func releasePages(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_REMOVE)
	}
}
