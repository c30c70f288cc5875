package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// appendRecord appends one record, a key and a value, in one write. The
// caller holds the exclusive lock and f was opened with O_APPEND.
func appendRecord(f *os.File, key string, value []byte) error {
	_, err := f.Write(wire.AppendBytes(wire.AppendString(nil, key), value))
	return err
}

// replay applies the records added to f since the cache last saw it. If
// the file was replaced (removed by the last worker and started again), the
// cache starts over. s.mu and a lock on f are held.
func (s *FileStore) replay(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if s.seen == nil || !os.SameFile(fi, s.seen) || fi.Size() < s.pos {
		s.cache, s.pos = make(map[string][]byte), 0
	}
	s.seen = fi
	if fi.Size() == s.pos {
		return nil
	}
	buf := make([]byte, fi.Size()-s.pos)
	if _, err := f.ReadAt(buf, s.pos); err != nil && err != io.EOF {
		return fmt.Errorf("store: reading %s: %w", s.path, err)
	}
	for off := 0; off < len(buf); {
		key, value, n := parseRecord(buf[off:])
		if n == 0 {
			return fmt.Errorf("%w: store: %s is corrupt: a truncated record at offset %d", pg.ErrComm, s.path, s.pos+int64(off))
		}
		s.apply(key, value)
		off += n
	}
	s.pos = fi.Size()
	return nil
}

func (s *FileStore) apply(key string, value []byte) {
	if deleted, ok := strings.CutPrefix(key, fileDeletePrefix); ok {
		delete(s.cache, deleted)
		return
	}
	s.cache[key] = value
}

// parseRecord splits the first record off b and returns its length, or 0
// if b does not hold a whole record.
func parseRecord(b []byte) (key string, value []byte, n int) {
	k, rest, ok := cutField(b)
	if !ok {
		return "", nil, 0
	}
	v, rest, ok := cutField(rest)
	if !ok {
		return "", nil, 0
	}
	return string(k), v, len(b) - len(rest)
}

func cutField(b []byte) (field, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, false
	}
	return b[4 : 4+n : 4+n], b[4+n:], true
}
