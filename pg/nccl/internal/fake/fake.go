package fake

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goddp/ddp/nccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

var _ binding.Backend = (*Backend)(nil)

// Backend is the test double of the binding layer (binding.Backend),
// as c10d's FakeProcessGroup: "device" memory is host memory, the
// "stream" is a goroutine that runs queued operations in order, and each
// NCCL call is carried out by a pg/local group of the same world, so the
// fake moves real data between ranks. Faults are injected with
// StallNext, InjectAsyncError and FailNext (knobs.go).
type Backend struct {
	lg  pg.Extended
	mem *memory
	st  *stream

	noAvg    bool
	aborted  atomic.Bool
	abortCh  chan struct{}
	asyncErr atomic.Int32          // injected ncclCommGetAsyncError result
	stall    atomic.Bool           // the next NCCL call blocks the stream until abort
	failNext atomic.Pointer[error] // the next NCCL call returns it at enqueue
	calls    atomic.Int64          // NCCL calls enqueued
	freed    atomic.Int64          // buffers freed
	closed   atomic.Bool
	detail   atomic.Value // string: what broke, as ncclGetLastError

	mu      sync.Mutex
	grouped *[]func(ctx context.Context) pg.Work // inside group()
	ops     map[nccl.RedOp]float64               // PreMulSum factors
	nextOp  nccl.RedOp
	self    *selfQueue
	pairs   *pairTable // shared by the world: the two-rank communicators

	dev device // device buckets: devbucket.go
}

// pairTable makes the two-rank "communicators" of point-to-point lanes:
// the first of the two ranks to present a unique id makes a pg/local
// world of two, the second takes its other rank.
type pairTable struct {
	mu      sync.Mutex
	next    uint64
	worlds  map[nccl.UniqueID][]pg.Extended
	timeout time.Duration
	made    atomic.Int64 // pair communicators made, counting each rank
}

func (b *Backend) UniqueID() (nccl.UniqueID, error) {
	var id nccl.UniqueID
	b.pairs.mu.Lock()
	b.pairs.next++
	binary.LittleEndian.PutUint64(id[:], b.pairs.next)
	b.pairs.mu.Unlock()
	return id, nil
}

func (b *Backend) Pair(ctx context.Context, id nccl.UniqueID, rank int) (binding.Backend, error) {
	if b.aborted.Load() {
		return nil, &nccl.Error{Func: "fake", Code: nccl.InvalidUsage, Desc: "communicator aborted"}
	}
	p := b.pairs
	p.mu.Lock()
	w := p.worlds[id]
	if w == nil {
		lgs, err := local.New(2, local.Options{Timeout: p.timeout})
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		w = []pg.Extended{lgs[0], lgs[1]}
		p.worlds[id] = w
	}
	p.mu.Unlock()
	p.made.Add(1)
	nb := newBackend(w[rank])
	nb.mem = b.mem // the same device: the parent's staging buffers
	nb.pairs = p
	return nb, nil
}

func newBackend(lg pg.Extended) *Backend {
	b := &Backend{lg: lg, mem: &memory{allocs: map[uintptr][]byte{}}, abortCh: make(chan struct{}),
		ops: map[nccl.RedOp]float64{}, nextOp: 5}
	b.st = newStream()
	b.dev.caps = binding.Caps{Version: 22800, MemAlloc: true, Register: true, Window: true}
	b.dev.regs = map[uintptr]string{}
	return b
}

// memory hands out "device pointers" id<<32 | offset.
type memory struct {
	mu     sync.Mutex
	next   uintptr
	allocs map[uintptr][]byte
}

func (m *memory) alloc(n int) nccl.DevicePtr {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	words := make([]uint64, (n+7)/8)
	m.allocs[m.next] = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), n)
	return nccl.DevicePtr(m.next << 32)
}

func (m *memory) at(p nccl.DevicePtr, n int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.allocs[uintptr(p)>>32]
	off := int(uintptr(p) & (1<<32 - 1))
	return b[off : off+n : off+n]
}

// stream runs queued functions in order on one goroutine.
type stream struct {
	mu    sync.Mutex
	queue []func()
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newStream() *stream {
	s := &stream{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *stream) enqueue(f func()) {
	s.mu.Lock()
	s.queue = append(s.queue, f)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *stream) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, f := range q {
			f()
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-s.kick:
		case <-s.stop:
			return
		}
	}
}

// event is a mark on a stream; at, for a timing event, is stamped with
// the time the stream passed it, before done is closed.
type event struct {
	done chan struct{}
	at   *time.Time
}

func (e event) Query() error {
	select {
	case <-e.done:
		return nil
	default:
		return nccl.ErrNotReady
	}
}
func (e event) Destroy() error { return nil }

// Elapsed is the wall time between the stream passing start and e, as
// cuEventElapsedTime measures the device's; it refuses what CUDA refuses.
func (e event) Elapsed(start binding.Event) (time.Duration, error) {
	s, ok := start.(event)
	if !ok || e.at == nil || s.at == nil {
		return 0, &nccl.Error{Func: "cuEventElapsedTime", Code: nccl.InvalidArgument,
			Desc: "not two timing events of the fake"}
	}
	if s.Query() != nil || e.Query() != nil {
		return 0, nccl.ErrNotReady
	}
	return e.at.Sub(*s.at), nil
}

// wait blocks until the stream has passed e, at most until ctx ends.
func (e event) wait(ctx context.Context) error {
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (b *Backend) Malloc(n int) (nccl.DevicePtr, error) { return b.mem.alloc(n), nil }
func (b *Backend) Free(nccl.DevicePtr) error            { b.freed.Add(1); return nil }
func (b *Backend) MallocHost(n int) ([]byte, error)     { return make([]byte, n), nil }
func (b *Backend) FreeHost([]byte) error                { return nil }

func (b *Backend) H2D(dst nccl.DevicePtr, src []byte) error {
	d := b.mem.at(dst, len(src))
	b.st.enqueue(func() { copy(d, src) })
	return nil
}
func (b *Backend) D2H(dst []byte, src nccl.DevicePtr) error {
	s := b.mem.at(src, len(dst))
	b.st.enqueue(func() { copy(dst, s) })
	return nil
}
func (b *Backend) D2D(dst, src nccl.DevicePtr, n int) error {
	d, s := b.mem.at(dst, n), b.mem.at(src, n)
	b.st.enqueue(func() { copy(d, s) })
	return nil
}
func (b *Backend) Record() (binding.Event, error) { return b.mark(), nil }
func (b *Backend) RecordTiming() (binding.Event, error) {
	e := event{done: make(chan struct{}), at: new(time.Time)}
	b.st.enqueue(func() { *e.at = time.Now(); close(e.done) })
	return e, nil
}
func (b *Backend) Synchronize(ctx context.Context) error {
	return b.mark().wait(ctx)
}

// mark is an event at the stream's current end.
func (b *Backend) mark() event {
	e := event{done: make(chan struct{})}
	b.st.enqueue(func() { close(e.done) })
	return e
}

func pgDtype(dt nccl.DataType) pg.Dtype {
	for _, d := range pg.Dtypes() {
		if binding.DataType(d) == dt {
			return d
		}
	}
	return 0
}

func (b *Backend) pgOp(op nccl.RedOp) pg.ReduceOp {
	switch op {
	case nccl.Sum:
		return pg.Op(pg.Sum)
	case nccl.Prod:
		return pg.Op(pg.Product)
	case nccl.Max:
		return pg.Op(pg.Max)
	case nccl.Min:
		return pg.Op(pg.Min)
	case nccl.Avg:
		return pg.Op(pg.Avg)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return pg.PremulSumOp(b.ops[op])
}

func (b *Backend) tensor(p nccl.DevicePtr, count int, dt nccl.DataType) pg.Tensor {
	d := pgDtype(dt)
	return pg.Tensor{Dtype: d, Data: b.mem.at(p, count*d.Size())}
}

// launch enqueues an NCCL call: run issues it on the local group and
// returns its Work; the stream waits for it, or for abort.
func (b *Backend) launch(run func(ctx context.Context) pg.Work) error {
	if err := b.failNext.Swap(nil); err != nil {
		return *err
	}
	if b.aborted.Load() {
		return &nccl.Error{Func: "fake", Code: nccl.InvalidUsage, Desc: "communicator aborted"}
	}
	b.calls.Add(1)
	b.mu.Lock()
	if b.grouped != nil {
		*b.grouped = append(*b.grouped, run)
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	stall := b.stall.Swap(false)
	b.st.enqueue(func() { b.execute(stall, []func(context.Context) pg.Work{run}) })
	return nil
}

// execute runs NCCL calls as the device would: concurrently, each until
// done; a failure becomes an asynchronous error and stalls the stream
// until abort, as a broken NCCL kernel does.
func (b *Backend) execute(stall bool, runs []func(context.Context) pg.Work) {
	if stall {
		<-b.abortCh
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, len(runs))
	for _, r := range runs { // issued in order, as NCCL launches a group's calls
		w := r(ctx)
		go func() { errs <- w.Wait(ctx) }()
	}
	var first error
	for range runs {
		select {
		case err := <-errs:
			if err != nil && first == nil {
				first = err
			}
		case <-b.abortCh:
			cancel()
			return
		}
	}
	if first != nil && !b.aborted.Load() {
		b.detail.Store(first.Error())
		code := nccl.SystemError
		if errors.Is(first, pg.ErrRemote) {
			code = nccl.RemoteError
		}
		b.asyncErr.CompareAndSwap(0, int32(code))
		<-b.abortCh
	}
}

func (b *Backend) AllReduce(send, recv nccl.DevicePtr, count int, dt nccl.DataType, op nccl.RedOp) error {
	in, out, o := b.tensor(send, count, dt), b.tensor(recv, count, dt), b.pgOp(op)
	return b.launch(func(ctx context.Context) pg.Work {
		b.dev.trace("allReduce")
		copy(out.Data, in.Data)
		return b.lg.AllReduce(ctx, out, o)
	})
}
func (b *Backend) Reduce(send, recv nccl.DevicePtr, count int, dt nccl.DataType, op nccl.RedOp, root int) error {
	in, out, o := b.tensor(send, count, dt), b.tensor(recv, count, dt), b.pgOp(op)
	return b.launch(func(ctx context.Context) pg.Work {
		copy(out.Data, in.Data)
		return b.lg.Reduce(ctx, out, root, o)
	})
}
func (b *Backend) Broadcast(send, recv nccl.DevicePtr, count int, dt nccl.DataType, root int) error {
	in, out := b.tensor(send, count, dt), b.tensor(recv, count, dt)
	return b.launch(func(ctx context.Context) pg.Work {
		copy(out.Data, in.Data)
		return b.lg.Broadcast(ctx, out, root)
	})
}
func (b *Backend) AllGather(send, recv nccl.DevicePtr, sendCount int, dt nccl.DataType) error {
	in, out := b.tensor(send, sendCount, dt), b.tensor(recv, sendCount*b.lg.Size(), dt)
	return b.launch(func(ctx context.Context) pg.Work {
		tmp := pg.NewTensor(in.Dtype, in.Len())
		copy(tmp.Data, in.Data) // NCCL's in-place allgather: in may lie inside out
		return b.lg.AllGather(ctx, out, tmp)
	})
}
func (b *Backend) ReduceScatter(send, recv nccl.DevicePtr, recvCount int, dt nccl.DataType, op nccl.RedOp) error {
	in, out, o := b.tensor(send, recvCount*b.lg.Size(), dt), b.tensor(recv, recvCount, dt), b.pgOp(op)
	return b.launch(func(ctx context.Context) pg.Work {
		tmp := pg.NewTensor(in.Dtype, in.Len())
		copy(tmp.Data, in.Data)
		return b.lg.ReduceScatter(ctx, out, tmp, o)
	})
}

// selfQueue pairs a group's send and recv to this rank, which NCCL allows
// and pg/local refuses.
type selfQueue struct {
	mu   sync.Mutex
	msgs [][]byte
	cond chan struct{}
}

func (b *Backend) Send(buf nccl.DevicePtr, count int, dt nccl.DataType, peer int) error {
	t := b.tensor(buf, count, dt)
	if peer == b.lg.Rank() {
		return b.launch(func(ctx context.Context) pg.Work { b.selfQ().put(t.Data); return pg.Completed(nil) })
	}
	return b.launch(func(ctx context.Context) pg.Work { return b.lg.Send(ctx, t, peer, 0) })
}
func (b *Backend) Recv(buf nccl.DevicePtr, count int, dt nccl.DataType, peer int) error {
	t := b.tensor(buf, count, dt)
	if peer == b.lg.Rank() {
		return b.launch(func(ctx context.Context) pg.Work {
			f := pg.NewFuture()
			go func() { f.Complete(b.selfQ().take(ctx, t.Data)) }()
			return f
		})
	}
	return b.launch(func(ctx context.Context) pg.Work { return b.lg.Recv(ctx, t, peer, 0) })
}

func (b *Backend) selfQ() *selfQueue {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.self == nil {
		b.self = &selfQueue{cond: make(chan struct{}, 1)}
	}
	return b.self
}

func (q *selfQueue) put(data []byte) {
	q.mu.Lock()
	q.msgs = append(q.msgs, append([]byte(nil), data...))
	q.mu.Unlock()
	select {
	case q.cond <- struct{}{}:
	default:
	}
}

func (q *selfQueue) take(ctx context.Context, dst []byte) error {
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			copy(dst, q.msgs[0])
			q.msgs = q.msgs[1:]
			q.mu.Unlock()
			return nil
		}
		q.mu.Unlock()
		select {
		case <-q.cond:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *Backend) Group(f func() error) error {
	var runs []func(context.Context) pg.Work
	b.mu.Lock()
	b.grouped = &runs
	b.mu.Unlock()
	err := f()
	b.mu.Lock()
	b.grouped = nil
	b.mu.Unlock()
	if err != nil {
		return err
	}
	stall := b.stall.Swap(false)
	b.st.enqueue(func() { b.execute(stall, runs) })
	return nil
}

func (b *Backend) PreMulSum(factor float64, dt nccl.DataType) (nccl.RedOp, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	op := b.nextOp
	b.nextOp++
	b.ops[op] = factor
	return op, nil
}
func (b *Backend) DestroyOp(nccl.RedOp) error { return nil }
func (b *Backend) HasAvg() bool               { return !b.noAvg }

func (b *Backend) AsyncError() (nccl.Result, error) { return nccl.Result(b.asyncErr.Load()), nil }

func (b *Backend) LastError() string {
	s, _ := b.detail.Load().(string)
	return s
}

func (b *Backend) Abort() error {
	if b.aborted.CompareAndSwap(false, true) {
		close(b.abortCh)
		b.lg.Abort(errors.New("ncclCommAbort"))
	}
	return nil
}

func (b *Backend) Split(ctx context.Context, color, key int) (binding.Backend, error) {
	// ncclCommSplit is a collective of the parent, ordered after what was
	// enqueued before it. The double's split runs on the caller's
	// goroutine, beside the stream's: drain the stream first, so every
	// rank's local group sees the split in the same place among the
	// collectives.
	if err := b.Synchronize(ctx); err != nil {
		return nil, err
	}
	sub, err := b.lg.Split(ctx, color, key)
	if err != nil || sub == nil {
		return nil, err
	}
	nb := newBackend(sub.(pg.Extended))
	nb.pairs = b.pairs
	return nb, nil
}

func (b *Backend) RankSize() (int, int, error) { return b.lg.Rank(), b.lg.Size(), nil }

func (b *Backend) Close(ctx context.Context) error {
	var err error
	if !b.aborted.Load() {
		err = b.Synchronize(ctx)
	}
	close(b.st.stop)
	<-b.st.done
	b.closed.Store(true)
	if cerr := b.lg.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// Options configure NewWorld.
type Options struct {
	// Timeout is the pg/local groups' timeout, which carry out the NCCL
	// calls; zero means two minutes. Make it longer than the timeout of
	// the Groups run on the backends, so that theirs fires first, as
	// NCCL's watchdog does.
	Timeout time.Duration
	// Version is the NCCL version the fake reports (zero: 2.28.0), and
	// NoMemAlloc, NoRegister and NoWindows remove the symbols of its
	// memory and registration APIs, as an older or stripped library
	// would.
	Version                           nccl.Version
	NoMemAlloc, NoRegister, NoWindows bool
}

// NewWorld makes the backends of n ranks over one pg/local world, which
// share the table of two-rank communicators that point-to-point lanes
// make. The returned function releases the halves of those pairs whose
// other rank never came; call it after closing the Groups run on the
// backends.
func NewWorld(n int, o Options) ([]*Backend, func(), error) {
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	lgs, err := local.New(n, local.Options{Timeout: o.Timeout})
	if err != nil {
		return nil, nil, err
	}
	bs := make([]*Backend, n)
	pairs := &pairTable{worlds: map[nccl.UniqueID][]pg.Extended{}, timeout: o.Timeout}
	for r := range lgs {
		bs[r] = newBackend(lgs[r])
		bs[r].pairs = pairs
		c := &bs[r].dev.caps
		if o.Version != 0 {
			c.Version = o.Version
		}
		c.MemAlloc, c.Register, c.Window = !o.NoMemAlloc, !o.NoRegister, !o.NoWindows
	}
	cleanup := func() {
		pairs.mu.Lock()
		defer pairs.mu.Unlock()
		for _, w := range pairs.worlds {
			for _, g := range w {
				_ = g.Close()
			}
		}
	}
	return bs, cleanup, nil
}
