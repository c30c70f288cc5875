package tcp

// barrier is, when every rank shares this host's memory, one chunk of
// the shared-memory world with no data (shm.World.Barrier: a counter
// each, no system call unless a rank sleeps); otherwise the dissemination
// barrier (Hensgen, Finkel & Manber): in round k each rank sends an empty
// frame to rank me+2^k and waits for one from rank me-2^k. After
// ceil(lg n) rounds every rank has heard, directly or not, from every
// other, so none leaves before all arrived.
func (g *Group) barrier(r *run) error {
	if g.shm != nil && g.shm.Full() {
		return g.shm.Barrier(r)
	}
	n, me := g.size, g.rank
	for k, d := 0, 1; d < n; k, d = k+1, d*2 {
		if err := r.send(g.links[mod(me+d, n)], uint32(k), nil); err != nil {
			return err
		}
		b, err := r.recv(g.links[mod(me-d, n)], uint32(k), 0)
		if err != nil {
			return err
		}
		r.release(b)
	}
	return r.flush()
}
