package store

import "context"

// PrefixStore namespaces another Store, like c10d's PrefixStore: key k is
// stored in the base as "prefix/k". Process groups built on one store use
// one PrefixStore each so that their keys cannot collide.
type PrefixStore struct {
	prefix string
	base   Store
}

var _ Store = (*PrefixStore)(nil)

// NewPrefixStore returns base with every key prefixed by prefix + "/".
func NewPrefixStore(prefix string, base Store) *PrefixStore {
	return &PrefixStore{prefix: prefix, base: base}
}

// Base returns the store under the prefix.
func (s *PrefixStore) Base() Store { return s.base }

func (s *PrefixStore) join(key string) string { return s.prefix + "/" + key }

// Set implements Store.
func (s *PrefixStore) Set(ctx context.Context, key string, value []byte) error {
	return s.base.Set(ctx, s.join(key), value)
}

// Get implements Store.
func (s *PrefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.base.Get(ctx, s.join(key))
}

// Add implements Store.
func (s *PrefixStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return s.base.Add(ctx, s.join(key), delta)
}

// CompareSet implements Store.
func (s *PrefixStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	return s.base.CompareSet(ctx, s.join(key), expected, desired)
}

// Wait implements Store. A timeout error names the prefixed keys.
func (s *PrefixStore) Wait(ctx context.Context, keys ...string) error {
	joined := make([]string, len(keys))
	for i, k := range keys {
		joined[i] = s.join(k)
	}
	return s.base.Wait(ctx, joined...)
}

// Delete implements Store.
func (s *PrefixStore) Delete(ctx context.Context, key string) (bool, error) {
	return s.base.Delete(ctx, s.join(key))
}

// NumKeys returns the number of keys in the base store, under every
// prefix, as c10d's PrefixStore does.
func (s *PrefixStore) NumKeys(ctx context.Context) (int64, error) {
	return s.base.NumKeys(ctx)
}

// Close does nothing: the base store is shared and its owner closes it.
func (s *PrefixStore) Close() error { return nil }
