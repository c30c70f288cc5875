package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
)

// FileStoreOptions configure a FileStore.
type FileStoreOptions struct {
	// Timeout bounds calls whose ctx has no deadline; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// PollInterval is how often a blocked Get or Wait rereads the file;
	// zero means 10 ms, as c10d.
	PollInterval time.Duration
	// Logger receives cleanup failures; nil means none.
	Logger *zap.Logger
}

// Record key prefixes in the file, as c10d's FileStore writes them.
const (
	fileKeyPrefix    = "/"        // a set: "/" + key
	fileDeletePrefix = "-"        // a delete: "-/" + key
	fileCleanupKey   = "cleanup/" // counts workers that have closed
)

// FileStore is a Store kept in a file that every process of a job on one
// machine (or on a shared file system with working flock) opens, like
// c10d's FileStore. Each write appends a record under an exclusive flock;
// readers replay the records they have not seen under a shared one. Get and
// Wait poll the file. The records are c10d's: a key and a value, each a
// little-endian uint32 length and the bytes.
type FileStore struct {
	path       string
	numWorkers int
	timeout    time.Duration
	poll       time.Duration
	log        *zap.Logger

	mu     sync.Mutex // guards what follows, and orders this process's file operations
	cache  map[string][]byte
	pos    int64       // how far into the file cache reflects
	seen   os.FileInfo // the file cache reflects, to notice it being replaced
	closed bool
}

var _ Store = (*FileStore)(nil)

// NewFileStore opens (creating if needed) the store file at path.
// numWorkers is how many processes share it: the last of them to Close
// removes the file. With numWorkers <= 0 the file is never removed.
func NewFileStore(path string, numWorkers int, opts FileStoreOptions) (*FileStore, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: store: FileStore needs a path", pg.ErrInvalidArgument)
	}
	f, err := openStoreFile(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	return &FileStore{
		path:       path,
		numWorkers: numWorkers,
		timeout:    orDefault(opts.Timeout),
		poll:       positive(opts.PollInterval, 10*time.Millisecond),
		log:        orNop(opts.Logger),
		cache:      make(map[string][]byte),
	}, nil
}

func openStoreFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return f, nil
}

// Set implements Store.
func (s *FileStore) Set(ctx context.Context, key string, value []byte) error {
	return s.do(ctx, "set", true, func(f *os.File) error {
		return appendRecord(f, fileKeyPrefix+key, value)
	})
}

// Get implements Store. It rereads the file every PollInterval until key
// is set.
func (s *FileStore) Get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.await(ctx, "get", []string{key}, func() bool {
		cur, ok := s.cache[fileKeyPrefix+key]
		v = clone(cur)
		return ok
	})
	return v, err
}

// Add implements Store.
func (s *FileStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	var sum int64
	err := s.do(ctx, "add", true, func(f *os.File) (err error) {
		sum, err = s.addLocked(f, fileKeyPrefix+key, key, delta)
		return err
	})
	return sum, err
}

// addLocked adds delta to the record rawKey; key names it in errors.
func (s *FileStore) addLocked(f *os.File, rawKey, key string, delta int64) (int64, error) {
	old, ok := s.cache[rawKey]
	sum, text, err := addDecimal(key, old, ok, delta)
	if err != nil {
		return 0, err
	}
	return sum, appendRecord(f, rawKey, text)
}

// CompareSet implements Store.
func (s *FileStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	var result []byte
	err := s.do(ctx, "compareSet", true, func(f *os.File) error {
		cur, ok := s.cache[fileKeyPrefix+key]
		var swap bool
		result, swap = compareSet(cur, ok, expected, desired)
		result = clone(result)
		if swap {
			return appendRecord(f, fileKeyPrefix+key, desired)
		}
		return nil
	})
	return result, err
}

// Wait implements Store.
func (s *FileStore) Wait(ctx context.Context, keys ...string) error {
	return s.await(ctx, "wait", keys, func() bool {
		for _, k := range keys {
			if _, ok := s.cache[fileKeyPrefix+k]; !ok {
				return false
			}
		}
		return true
	})
}

// Delete implements Store.
func (s *FileStore) Delete(ctx context.Context, key string) (bool, error) {
	var existed bool
	err := s.do(ctx, "delete", true, func(f *os.File) error {
		if _, existed = s.cache[fileKeyPrefix+key]; !existed {
			return nil
		}
		return appendRecord(f, fileDeletePrefix+fileKeyPrefix+key, nil)
	})
	return existed, err
}

// NumKeys implements Store.
func (s *FileStore) NumKeys(ctx context.Context) (int64, error) {
	var n int64
	err := s.do(ctx, "numKeys", false, func(*os.File) error {
		for k := range s.cache {
			if strings.HasPrefix(k, fileKeyPrefix) {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Close counts this worker out, and the last of numWorkers to close
// removes the file, as c10d's FileStore destructor does. Later calls fail
// with ErrClosed. Close is idempotent.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.numWorkers <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var done int64
	err := s.withFile(ctx, true, func(f *os.File) (err error) {
		done, err = s.addLocked(f, fileCleanupKey, fileCleanupKey, 1)
		return err
	})
	if err == nil && done >= int64(s.numWorkers) {
		if err = os.Remove(s.path); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		s.log.Warn("store: FileStore cleanup failed", zap.String("path", s.path), zap.Error(err))
		return fmt.Errorf("store: closing %s: %w", s.path, err)
	}
	return nil
}

// do runs fn with the file open, locked and replayed into the cache.
func (s *FileStore) do(ctx context.Context, op string, exclusive bool, fn func(*os.File) error) error {
	ctx, cancel := bound(ctx, s.timeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	err := s.withFile(ctx, exclusive, fn)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: store: %s: could not lock %s in time", pg.ErrTimeout, op, s.path)
	}
	return err
}

// await polls until found, run on a fresh cache, reports true.
func (s *FileStore) await(ctx context.Context, op string, keys []string, found func() bool) error {
	ctx, cancel := bound(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	for {
		var ok bool
		err := s.do(ctx, op, false, func(*os.File) error { ok = found(); return nil })
		switch {
		case ctx.Err() != nil:
			return waitErr(ctx, op, keys, start)
		case err != nil:
			return err
		case ok:
			return nil
		}
		select {
		case <-time.After(s.poll):
		case <-ctx.Done():
			return waitErr(ctx, op, keys, start)
		}
	}
}

// withFile opens and locks the file, replays new records, and runs fn.
// s.mu is held.
func (s *FileStore) withFile(ctx context.Context, exclusive bool, fn func(*os.File) error) error {
	f, err := openStoreFile(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := lockFile(ctx, f, exclusive); err != nil {
		return err
	}
	defer unlockFile(f)
	if err := s.replay(f); err != nil {
		return err
	}
	return fn(f)
}
