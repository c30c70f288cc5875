//go:build mpi

package mpi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// StoreOptions tunes NewStore.
type StoreOptions struct {
	// ListenAddr is where rank 0's server listens; empty means every
	// interface, on a port the kernel picks.
	ListenAddr string
	// Timeout bounds the store's calls whose ctx has no deadline; zero
	// means store.DefaultTimeout.
	Timeout time.Duration
	// Logger receives the store's events; nil is none.
	Logger *zap.Logger
}

// storeMessageBytes is the size of the message rank 0 broadcasts: a
// length, then "SECRET PORT ADDR,ADDR,...".
const storeMessageBytes = 4096

// NewStore gives an MPI job the store the other backends meet through,
// so that wrappers that keep state in one (pg/desync's diagnosis of a
// stalled collective) work over MPI too. Rank 0 hosts a store.TCPStore
// with a fresh secret and broadcasts, over g itself, the secret, the
// server's port and the addresses of its host's interfaces (loopback
// last); every other rank connects to the first of them that answers.
// MPI's own channel carries the secret, so only ranks of the job learn
// it. Every rank must call it, as a collective.
func NewStore(ctx context.Context, g *Group, o StoreOptions) (*store.TCPStore, error) {
	if o.ListenAddr == "" {
		o.ListenAddr = ":0"
	}
	msg := make([]byte, storeMessageBytes)
	var host *store.TCPStore
	if g.Rank() == 0 {
		var err error
		if host, err = hostStore(ctx, o, msg); err != nil {
			return nil, err
		}
	}
	if err := g.Broadcast(ctx, pg.Uint8s(msg), 0).Wait(ctx); err != nil {
		if host != nil {
			host.Close()
		}
		return nil, fmt.Errorf("mpi: sending the store's address: %w", err)
	}
	if host != nil {
		return host, nil
	}
	return joinStore(ctx, o, msg)
}

// hostStore starts rank 0's store and writes the message that finds it.
func hostStore(ctx context.Context, o StoreOptions, msg []byte) (*store.TCPStore, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: o.ListenAddr, IsServer: true,
		Secret: []byte(hex.EncodeToString(secret)), Timeout: o.Timeout, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("mpi: hosting the store on %s: %w", o.ListenAddr, err)
	}
	_, port, _ := net.SplitHostPort(st.Server().Addr())
	text := hex.EncodeToString(secret) + " " + port + " " + strings.Join(localAddrs(), ",")
	if len(text)+4 > len(msg) {
		text = text[:strings.LastIndexByte(text[:len(msg)-4], ',')]
	}
	binary.LittleEndian.PutUint32(msg, uint32(len(text)))
	copy(msg[4:], text)
	return st, nil
}

// joinStore connects to the store the message names.
func joinStore(ctx context.Context, o StoreOptions, msg []byte) (*store.TCPStore, error) {
	n := int(binary.LittleEndian.Uint32(msg))
	if n > len(msg)-4 {
		return nil, errors.New("mpi: the store's address from rank 0 is corrupt")
	}
	f := strings.Fields(string(msg[4 : 4+n]))
	if len(f) != 3 {
		return nil, errors.New("mpi: the store's address from rank 0 is corrupt")
	}
	secret, port := f[0], f[1]
	var tried []string
	for _, a := range strings.Split(f[2], ",") {
		addr := net.JoinHostPort(a, port)
		if !answers(ctx, addr) {
			tried = append(tried, addr)
			continue
		}
		st, err := store.NewTCPStore(ctx,
			store.TCPStoreOptions{Addr: addr, Secret: []byte(secret), Timeout: o.Timeout, Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("mpi: joining rank 0's store at %s: %w", addr, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("mpi: rank 0's store answers at none of %v: is a firewall between the hosts?", tried)
}

// answers reports whether a TCP connection to addr opens within a second.
func answers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// localAddrs lists this host's interface addresses, loopback last.
func localAddrs() []string {
	as, _ := net.InterfaceAddrs()
	var out, loop []string
	for _, a := range as {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.IsLoopback() {
			loop = append(loop, ipn.IP.String())
			continue
		}
		out = append(out, ipn.IP.String())
	}
	return append(out, loop...)
}
