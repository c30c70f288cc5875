package store

import (
	"container/list"
	"net"
	"sync/atomic"
)

// Note [admission]
//
// Rendezvous must not wait on connections that never authenticate. Were
// every connection counted alike, a thousand idle sockets that reconnect
// when dropped would fill the server's connection cap, each for the whole
// handshake timeout, and the ranks' own connections would be refused until
// a slot happened to be free when they retried: rendezvous would take tens
// of seconds instead of under one.
//
// So a connection still in the handshake is "pending", and pending
// connections have caps of their own, overall (MaxUnauthenticated) and
// per remote host (MaxUnauthenticatedPerHost), besides MaxConns, which
// counts every connection. A handshake has HandshakeTimeout (3 s) to
// finish. When a new connection would exceed a cap, the server closes at
// once the oldest pending connection that has not sent a byte yet, from
// the same host when the per-host cap is the one exceeded; only when
// there is none (every pending connection is mid-handshake, or the slots
// hold authenticated clients) is the newcomer closed instead.
//
// Evicting the oldest silent connection rather than refusing the newest
// is what lets a rank through during a flood from its own host: a rank
// sends its half of the handshake within a round trip of the greeting,
// after which it cannot be evicted, and it is the youngest connection
// when it arrives, so it is evicted only if a whole cap's worth of newer
// connections arrive from its host within that round trip. Refusing the
// newest instead hands every freed slot to whichever reconnecting idle
// socket asks first, which is the flood. A client whose handshake was cut
// short retries with backoff (Client.dialPooled).

// pending is a connection in the handshake.
type pending struct {
	conn  net.Conn
	host  string
	elem  *list.Element // in admission.queue; nil once it left it
	heard atomic.Bool   // the peer has sent at least one byte
}

// Read marks the connection heard once bytes arrive.
func (p *pending) Read(b []byte) (int, error) {
	n, err := p.conn.Read(b)
	if n > 0 {
		p.heard.Store(true)
	}
	return n, err
}

// Write writes to the connection.
func (p *pending) Write(b []byte) (int, error) { return p.conn.Write(b) }

// admission keeps the pending connections, oldest first, and counts them
// per host. The Server's mu guards it.
type admission struct {
	maxPending, maxPerHost int

	queue  list.List // *pending, oldest first
	byHost map[string]int
}

// overCap names the cap a new connection from host would exceed, given
// open connections of at most maxConns, or returns "".
func (a *admission) overCap(host string, open, maxConns int) string {
	switch {
	case open >= maxConns:
		return "too many open connections"
	case a.queue.Len() >= a.maxPending:
		return "too many unauthenticated connections"
	case a.byHost[host] >= a.maxPerHost:
		return "too many unauthenticated connections from one host"
	}
	return ""
}

// victim returns the oldest pending connection that has sent nothing, from
// host if host is not empty, or nil. Bytes count as sent once they are in
// the kernel's buffer, read or not.
func (a *admission) victim(host string) *pending {
	for e := a.queue.Front(); e != nil; e = e.Next() {
		p := e.Value.(*pending)
		if p.heard.Load() || (host != "" && p.host != host) {
			continue
		}
		if !sentBytes(p.conn) {
			return p
		}
		p.heard.Store(true)
	}
	return nil
}

func (a *admission) add(p *pending) {
	p.elem = a.queue.PushBack(p)
	a.byHost[p.host]++
}

// remove takes p out of the queue; it reports false if it was not in it.
func (a *admission) remove(p *pending) bool {
	if p.elem == nil {
		return false
	}
	a.queue.Remove(p.elem)
	p.elem = nil
	if a.byHost[p.host]--; a.byHost[p.host] <= 0 {
		delete(a.byHost, p.host)
	}
	return true
}

// hostOf is the host part of a remote address.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
