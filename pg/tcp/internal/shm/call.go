package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// Call describes a collective to the peers: every rank publishes it with
// each chunk, and every rank compares each peer's with its own, so that
// ranks that issued different collectives, or one collective with
// different sizes, dtypes, ops or roots, fail with pg.ErrMismatch naming
// the peer instead of reading each other's garbage.
type Call struct {
	Op    pg.OpType
	Bytes int // the length that decides the chunks: the tensor's, or one rank's part
	Dtype pg.Dtype
	Kind  pg.ReduceKind
	Root  int
}

// Meta is the call as it sits in a slot's metadata, for chunk c. Every
// shared-memory path, AllReduce's included, writes it, so ranks in
// different collectives are caught whichever two meet.
func (m Call) Meta(c uint32) (b [MetaStride]byte) {
	binary.LittleEndian.PutUint64(b[0:], uint64(m.Bytes))
	binary.LittleEndian.PutUint32(b[8:], uint32(m.Dtype))
	binary.LittleEndian.PutUint32(b[12:], uint32(m.Kind))
	binary.LittleEndian.PutUint32(b[16:], c)
	binary.LittleEndian.PutUint32(b[20:], uint32(m.Op))
	binary.LittleEndian.PutUint32(b[24:], uint32(m.Root))
	return b
}

// String describes the call for an error message.
func (m Call) String() string {
	s := fmt.Sprintf("%v of %d bytes of %v", m.Op, m.Bytes, m.Dtype)
	switch m.Op {
	case pg.OpBroadcast, pg.OpScatter:
		s += fmt.Sprintf(" from root %d", m.Root)
	case pg.OpGather:
		s += fmt.Sprintf(" to root %d", m.Root)
	case pg.OpAllToAll: // its sizes differ by rank; AllToAll checks them
		s = fmt.Sprintf("%v of %v", m.Op, m.Dtype)
	case pg.OpReduceScatter:
		s += fmt.Sprintf(" (%v)", m.Kind)
	case pg.OpReduce:
		s += fmt.Sprintf(" (%v) to root %d", m.Kind, m.Root)
	}
	return s
}

// callOf decodes a peer's metadata, only to say how it differs.
func callOf(b []byte) (Call, uint32) {
	m := Call{
		Bytes: int(binary.LittleEndian.Uint64(b[0:]) & (1<<62 - 1)),
		Dtype: pg.Dtype(binary.LittleEndian.Uint32(b[8:])),
		Kind:  pg.ReduceKind(binary.LittleEndian.Uint32(b[12:])),
		Op:    pg.OpType(binary.LittleEndian.Uint32(b[20:])),
		Root:  int(int32(binary.LittleEndian.Uint32(b[24:]))),
	}
	return m, binary.LittleEndian.Uint32(b[16:])
}
