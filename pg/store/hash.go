package store

import (
	"context"
	"sync"
	"time"
)

// HashStoreOptions configure a HashStore.
type HashStoreOptions struct {
	// Timeout bounds a blocking call (Get, Wait) whose ctx has no
	// deadline; zero means DefaultTimeout.
	Timeout time.Duration
}

// HashStore is an in-memory Store for ranks that live in one process, like
// c10d's HashStore: a map under a mutex. It is safe for concurrent use.
// Get and Wait block until their keys are set, ctx ends, or the store's
// timeout passes; a timeout is a *TimeoutError wrapping pg.ErrTimeout.
type HashStore struct {
	timeout time.Duration

	mu      sync.Mutex
	m       map[string][]byte
	changed chan struct{} // closed and replaced whenever a key is set or the store closes
	closed  bool
}

var _ Store = (*HashStore)(nil)

// NewHashStore returns an empty store.
func NewHashStore(opts HashStoreOptions) *HashStore {
	return &HashStore{
		timeout: orDefault(opts.Timeout),
		m:       make(map[string][]byte),
		changed: make(chan struct{}),
	}
}

// setLocked stores a copy of value and wakes every waiter. s.mu is held.
func (s *HashStore) setLocked(key string, value []byte) {
	s.m[key] = clone(value)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Set stores value under key.
func (s *HashStore) Set(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.setLocked(key, value)
	return nil
}

// Get returns key's value, waiting until it is set.
func (s *HashStore) Get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.wait(ctx, "get", []string{key}, func() { v = clone(s.m[key]) })
	return v, err
}

// Wait blocks until every key exists, ctx ends or the store's timeout
// passes.
func (s *HashStore) Wait(ctx context.Context, keys ...string) error {
	return s.wait(ctx, "wait", keys, func() {})
}

// wait blocks until every key is present and then runs found with s.mu
// held, so a Get reads the value that satisfied it.
func (s *HashStore) wait(ctx context.Context, op string, keys []string, found func()) error {
	start := time.Now()
	ctx, cancel := bound(ctx, s.timeout)
	defer cancel()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.hasAllLocked(keys) {
			found()
			s.mu.Unlock()
			return nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return waitErr(ctx, op, keys, start)
		}
	}
}

func (s *HashStore) hasAllLocked(keys []string) bool {
	for _, k := range keys {
		if _, ok := s.m[k]; !ok {
			return false
		}
	}
	return true
}

// Add adds delta to the decimal integer stored under key (0 if absent),
// stores the sum as decimal text and returns it.
func (s *HashStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	old, ok := s.m[key]
	sum, text, err := addDecimal(key, old, ok, delta)
	if err != nil {
		return 0, err
	}
	s.setLocked(key, text)
	return sum, nil
}

// CompareSet sets key to desired if it holds expected (or is absent and
// expected is empty), and returns the value now stored, as c10d does.
func (s *HashStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	cur, ok := s.m[key]
	result, swap := compareSet(cur, ok, expected, desired)
	if swap {
		s.setLocked(key, desired)
	}
	return clone(result), nil
}

// Delete removes key and reports whether it existed.
func (s *HashStore) Delete(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	_, ok := s.m[key]
	delete(s.m, key)
	return ok, nil
}

// NumKeys returns the number of keys stored.
func (s *HashStore) NumKeys(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	return int64(len(s.m)), nil
}

// Close fails every blocked and later call with ErrClosed. It is
// idempotent.
func (s *HashStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
	}
	return nil
}
