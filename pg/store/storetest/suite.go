package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// Factory starts a fresh, empty store whose timeout, for calls whose ctx
// has no deadline, is timeout. It returns a function that opens a client on
// that store; clients see each other's writes. Both release what they hold
// through t.Cleanup.
type Factory func(t *testing.T, timeout time.Duration) (open func() store.Store)

// long bounds calls that must succeed, so that a bug fails the test
// instead of hanging it.
const long = 20 * time.Second

// Run runs the suite against the stores f makes.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"SetGet", testSetGet},
		{"GetBlocksUntilSet", testGetBlocksUntilSet},
		{"GetTimeout", testGetTimeout},
		{"GetCtxDeadlineWins", testGetCtxDeadlineWins},
		{"GetCancel", testGetCancel},
		{"Add", testAdd},
		{"AddConcurrent", testAddConcurrent},
		{"CompareSet", testCompareSet},
		{"Wait", testWait},
		{"WaitTimeout", testWaitTimeout},
		{"Delete", testDelete},
		{"NumKeys", testNumKeys},
		{"ConcurrentClients", testConcurrentClients},
		{"BlockedGetDoesNotBlockSet", testBlockedGetDoesNotBlockSet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, f) })
	}
}

func ctxLong(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), long)
	t.Cleanup(cancel)
	return ctx
}

func mustSet(t *testing.T, s store.Store, key, value string) {
	t.Helper()
	if err := s.Set(ctxLong(t), key, []byte(value)); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s store.Store, key, want string) {
	t.Helper()
	got, err := s.Get(ctxLong(t), key)
	if err != nil || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, got, err, want)
	}
}

// absent checks that key is not set: a Get bounded by a short ctx times out.
func absent(t *testing.T, s store.Store, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if v, err := s.Get(ctx, key); !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("Get(%q) = %q, %v; want the key absent (a timeout)", key, v, err)
	}
}

func testSetGet(t *testing.T, f Factory) {
	s := f(t, long)()
	mustSet(t, s, "a", "1")
	mustGet(t, s, "a", "1")
	mustSet(t, s, "a", "two")
	mustGet(t, s, "a", "two")

	binary := []byte{0, 1, 0xFF, 0, '/', 0}
	value := bytes.Clone(binary)
	if err := s.Set(ctxLong(t), "dir/κλειδί", value); err != nil {
		t.Fatal(err)
	}
	value[0] = 'X' // the store must have kept its own copy
	got, err := s.Get(ctxLong(t), "dir/κλειδί")
	if err != nil || !bytes.Equal(got, binary) {
		t.Fatalf("Get = %x, %v; want %x", got, err, binary)
	}

	mustSet(t, s, "empty", "")
	if got, err := s.Get(ctxLong(t), "empty"); err != nil || len(got) != 0 {
		t.Fatalf("Get of an empty value = %q, %v; want it present and empty", got, err)
	}
}

func testGetBlocksUntilSet(t *testing.T, f Factory) {
	open := f(t, long)
	getter, setter := open(), open()
	done := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done <- setter.Set(ctxLong(t), "late", []byte("here"))
	}()
	mustGet(t, getter, "late", "here")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func checkTimeout(t *testing.T, err error, keys ...string) {
	t.Helper()
	if !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("err = %v; want one wrapping pg.ErrTimeout", err)
	}
	for _, k := range keys {
		if strings.Contains(err.Error(), k) {
			return
		}
	}
	t.Fatalf("timeout error %q names none of the missing keys %q", err, keys)
}

// testGetTimeout: with no deadline on ctx, the store's own timeout applies.
func testGetTimeout(t *testing.T, f Factory) {
	const timeout = 200 * time.Millisecond
	s := f(t, timeout)()
	start := time.Now()
	_, err := s.Get(context.Background(), "never-set")
	elapsed := time.Since(start)
	checkTimeout(t, err, "never-set")
	if elapsed < timeout*3/4 || elapsed > long/2 {
		t.Fatalf("Get gave up after %v; the store timeout is %v", elapsed, timeout)
	}
}

// testGetCtxDeadlineWins: a ctx deadline shorter than the store timeout wins.
func testGetCtxDeadlineWins(t *testing.T, f Factory) {
	s := f(t, time.Hour)()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Get(ctx, "never-set")
	checkTimeout(t, err, "never-set")
	if elapsed := time.Since(start); elapsed > long/2 {
		t.Fatalf("Get ignored its ctx deadline: it returned after %v", elapsed)
	}
}

func testGetCancel(t *testing.T, f Factory) {
	s := f(t, time.Hour)()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := s.Get(ctx, "never-set"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
}

func mustAdd(t *testing.T, s store.Store, key string, delta, want int64) {
	t.Helper()
	got, err := s.Add(ctxLong(t), key, delta)
	if err != nil || got != want {
		t.Fatalf("Add(%q, %d) = %d, %v; want %d", key, delta, got, err, want)
	}
}

func testAdd(t *testing.T, f Factory) {
	s := f(t, long)()
	mustAdd(t, s, "n", 5, 5)
	mustAdd(t, s, "n", -7, -2)
	mustAdd(t, s, "n", 0, -2)
	mustGet(t, s, "n", "-2") // decimal text, as c10d stores it
	mustSet(t, s, "m", "40")
	mustAdd(t, s, "m", 2, 42)

	mustSet(t, s, "word", "hello")
	if _, err := s.Add(ctxLong(t), "word", 1); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("Add to a non-integer: err = %v; want pg.ErrInvalidArgument", err)
	}
	mustGet(t, s, "word", "hello")
}

// testAddConcurrent: adds from many goroutines, on shared and separate
// clients, are atomic: every caller sees a distinct total.
func testAddConcurrent(t *testing.T, f Factory) {
	const workers, adds = 8, 25
	open := f(t, long)
	shared := open()
	results := make(chan int64, workers*adds)
	errs := make(chan error, workers)
	for w := range workers {
		s := shared
		if w%2 == 1 {
			s = open()
		}
		go func() {
			for range adds {
				n, err := s.Add(ctxLong(t), "counter", 1)
				if err != nil {
					errs <- err
					return
				}
				results <- n
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(results)
	seen := make(map[int64]bool)
	for n := range results {
		if n < 1 || n > workers*adds || seen[n] {
			t.Fatalf("Add returned %d, out of range or twice; adds are not atomic", n)
		}
		seen[n] = true
	}
	mustGet(t, shared, "counter", fmt.Sprint(workers*adds))
}

func mustCompareSet(t *testing.T, s store.Store, key, expected, desired, want string) {
	t.Helper()
	got, err := s.CompareSet(ctxLong(t), key, []byte(expected), []byte(desired))
	if err != nil || string(got) != want {
		t.Fatalf("CompareSet(%q, %q, %q) = %q, %v; want %q", key, expected, desired, got, err, want)
	}
}

func testCompareSet(t *testing.T, f Factory) {
	s := f(t, long)()
	// Absent key, empty expected: set.
	mustCompareSet(t, s, "k", "", "first", "first")
	mustGet(t, s, "k", "first")
	// Present and equal: swap.
	mustCompareSet(t, s, "k", "first", "second", "second")
	mustGet(t, s, "k", "second")
	// Present and different: unchanged, the current value returned.
	mustCompareSet(t, s, "k", "first", "third", "second")
	mustCompareSet(t, s, "k", "", "third", "second")
	mustGet(t, s, "k", "second")
	// Absent key, non-empty expected: nothing set, expected returned.
	mustCompareSet(t, s, "gone", "old", "new", "old")
	absent(t, s, "gone")
}

func testWait(t *testing.T, f Factory) {
	open := f(t, long)
	waiter, setter := open(), open()
	if err := waiter.Wait(ctxLong(t)); err != nil {
		t.Fatalf("Wait for no keys: %v", err)
	}
	mustSet(t, setter, "x", "1")
	done := make(chan error, 1)
	go func() {
		time.Sleep(30 * time.Millisecond)
		if err := setter.Set(ctxLong(t), "y", nil); err != nil {
			done <- err
			return
		}
		time.Sleep(30 * time.Millisecond)
		done <- setter.Set(ctxLong(t), "z", []byte("3"))
	}()
	if err := waiter.Wait(ctxLong(t), "x", "y", "z"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustGet(t, waiter, "z", "3") // Wait returned only after the last key
}

func testWaitTimeout(t *testing.T, f Factory) {
	s := f(t, 150*time.Millisecond)()
	mustSet(t, s, "here", "1")
	err := s.Wait(context.Background(), "here", "missing")
	checkTimeout(t, err, "missing")
}

func testDelete(t *testing.T, f Factory) {
	s := f(t, long)()
	mustSet(t, s, "d", "1")
	mustSet(t, s, "keep", "1")
	if ok, err := s.Delete(ctxLong(t), "d"); err != nil || !ok {
		t.Fatalf("Delete of a present key = %v, %v; want true", ok, err)
	}
	if ok, err := s.Delete(ctxLong(t), "d"); err != nil || ok {
		t.Fatalf("Delete of a deleted key = %v, %v; want false", ok, err)
	}
	if ok, err := s.Delete(ctxLong(t), "never"); err != nil || ok {
		t.Fatalf("Delete of a missing key = %v, %v; want false", ok, err)
	}
	absent(t, s, "d")
	mustGet(t, s, "keep", "1")
	mustAdd(t, s, "d", 1, 1) // a deleted counter starts again from zero
}

func mustNumKeys(t *testing.T, s store.Store, want int64) {
	t.Helper()
	if n, err := s.NumKeys(ctxLong(t)); err != nil || n != want {
		t.Fatalf("NumKeys = %d, %v; want %d", n, err, want)
	}
}

func testNumKeys(t *testing.T, f Factory) {
	s := f(t, long)()
	mustNumKeys(t, s, 0)
	mustSet(t, s, "a", "1")
	mustSet(t, s, "b", "1")
	mustAdd(t, s, "c", 1, 1)
	mustNumKeys(t, s, 3)
	mustSet(t, s, "a", "2")
	mustNumKeys(t, s, 3)
	if _, err := s.Delete(ctxLong(t), "b"); err != nil {
		t.Fatal(err)
	}
	mustNumKeys(t, s, 2)
}

// testConcurrentClients plays a rendezvous: every rank publishes its
// address, counts itself in, waits for the others and reads their
// addresses, each on its own client.
func testConcurrentClients(t *testing.T, f Factory) {
	const ranks = 6
	open := f(t, long)
	clients := make([]store.Store, ranks)
	for r := range clients {
		clients[r] = open()
	}
	errs := make(chan error, ranks)
	for r, s := range clients {
		go func() { errs <- rendezvous(ctxLong(t), s, r, ranks) }()
	}
	for range ranks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, clients[0], "arrived", fmt.Sprint(ranks))
}

func rendezvous(ctx context.Context, s store.Store, rank, ranks int) error {
	if err := s.Set(ctx, fmt.Sprintf("addr/%d", rank), []byte(fmt.Sprintf("host-%d", rank))); err != nil {
		return err
	}
	if _, err := s.Add(ctx, "arrived", 1); err != nil {
		return err
	}
	for peer := range ranks {
		v, err := s.Get(ctx, fmt.Sprintf("addr/%d", peer))
		if err != nil {
			return fmt.Errorf("rank %d: %w", rank, err)
		}
		if want := fmt.Sprintf("host-%d", peer); string(v) != want {
			return fmt.Errorf("rank %d read %q for peer %d, want %q", rank, v, peer, want)
		}
	}
	return nil
}

// testBlockedGetDoesNotBlockSet: one client, used by two goroutines: a Get
// waiting for a key must not stop the other goroutine setting it.
func testBlockedGetDoesNotBlockSet(t *testing.T, f Factory) {
	s := f(t, long)()
	got := make(chan error, 1)
	go func() {
		v, err := s.Get(ctxLong(t), "handoff")
		if err == nil && string(v) != "ok" {
			err = fmt.Errorf("got %q from Get, want \"ok\"", v)
		}
		got <- err
	}()
	time.Sleep(30 * time.Millisecond) // let the Get park first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Set(ctx, "handoff", []byte("ok")); err != nil {
		t.Fatalf("Set while a Get is blocked on the same client: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
