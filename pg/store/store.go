package store

import (
	"context"
	"errors"
)

// Store is a small key-value store that ranks use to find each other, like
// c10d's Store. Keys are strings and values bytes. Every call that can
// block takes ctx and honours its deadline; the implementations also apply
// their own default timeout when ctx has none (DefaultTimeout unless set).
// A Get or Wait that times out returns an error wrapping pg.ErrTimeout that
// names the keys (a *TimeoutError); calls on a closed store return
// ErrClosed.
type Store interface {
	// Set stores value under key, replacing any old value, and wakes
	// anyone waiting for key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns key's value, waiting until the key is set or ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
	// Add adds delta to the integer stored under key (0 if absent) and
	// returns the new value. The value is stored as decimal text, as
	// c10d does, so Get on it returns e.g. "3".
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareSet sets key to desired if its current value equals expected,
	// or if the key is absent and expected is empty. It returns the value
	// now stored (desired on success, the current value otherwise; for an
	// absent key with non-empty expected, expected itself, as c10d does).
	CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
	// Wait blocks until every key exists or ctx ends.
	Wait(ctx context.Context, keys ...string) error
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// NumKeys returns the number of keys stored.
	NumKeys(ctx context.Context) (int64, error)
	// Close releases the store's connections. It does not stop a server.
	Close() error
}

// ErrClosed is returned by calls on a closed store.
var ErrClosed = errors.New("store: closed")
