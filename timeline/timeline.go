package timeline

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Lanes of a rank's trace.
const (
	LaneStep    = 0   // one slice per iteration
	LaneCompute = 1   // forward and backward
	LaneReducer = 2   // gradient copies, hook launches and waits
	LaneBucket  = 100 // LaneBucket+b: bucket b's communication
)

// Arg is one integer argument of an event, shown in Perfetto's details.
type Arg struct {
	Key   string
	Value int64
}

// Event is one complete event. Args with an empty Key are skipped.
type Event struct {
	Name       string
	Lane       int
	Start, End time.Time
	Args       [3]Arg
}

// Writer writes one rank's trace. It is safe for concurrent use, and
// writing an event allocates nothing once its buffer has grown.
type Writer struct {
	mu     sync.Mutex
	w      *bufio.Writer
	c      io.Closer // nil when the caller owns the destination
	pid    int
	lanes  map[int]bool
	buf    []byte
	first  bool
	err    error
	closed bool
}

// New writes a trace for rank to w. Close finishes it; it does not close w.
func New(w io.Writer, rank int) *Writer {
	t := &Writer{w: bufio.NewWriterSize(w, 64<<10), pid: rank, lanes: map[int]bool{}, first: true}
	t.w.WriteString("[\n")
	t.metaName("process_name", -1, fmt.Sprintf("rank %d", rank))
	t.metaSortIndex("process_sort_index", -1, rank)
	return t
}

// Create writes a trace for rank to a new file at path, replacing a file
// there; a symbolic link at path is refused (where the platform can tell,
// with O_NOFOLLOW), never written through.
func Create(path string, rank int) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|oNoFollow, 0o666)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	t := New(f, rank)
	t.c = f
	return t, nil
}

// NameLane gives a lane the name Perfetto shows for it. Lanes the
// package defines are named when first used.
func (t *Writer) NameLane(lane int, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nameLane(lane, name)
}

func (t *Writer) nameLane(lane int, name string) {
	if t.lanes[lane] {
		return
	}
	t.lanes[lane] = true
	t.metaName("thread_name", lane, name)
	t.metaSortIndex("thread_sort_index", lane, lane)
}

func laneName(lane int) string {
	switch {
	case lane == LaneStep:
		return "step"
	case lane == LaneCompute:
		return "compute"
	case lane == LaneReducer:
		return "reducer"
	case lane >= LaneBucket:
		return fmt.Sprintf("bucket %d", lane-LaneBucket)
	}
	return fmt.Sprintf("lane %d", lane)
}

// metaName writes a metadata event that names the process or a lane.
func (t *Writer) metaName(event string, lane int, name string) {
	b := t.metaHead(event, lane)
	b = append(b, `,"args":{"name":`...)
	b = appendJSONString(b, name)
	t.close(append(b, "}}"...))
}

// metaSortIndex writes a metadata event that orders the process or a lane.
func (t *Writer) metaSortIndex(event string, lane, index int) {
	b := t.metaHead(event, lane)
	b = append(b, `,"args":{"sort_index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	t.close(append(b, "}}"...))
}

// metaHead opens a metadata event of the process (lane < 0) or a lane;
// event is one of the constant names above.
func (t *Writer) metaHead(event string, lane int) []byte {
	b := t.open()
	b = append(b, `"ph":"M","name":"`...)
	b = append(b, event...)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, int64(t.pid), 10)
	if lane >= 0 {
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(lane), 10)
	}
	return b
}

// Write writes one complete event.
func (t *Writer) Write(e *Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if !t.lanes[e.Lane] {
		t.nameLane(e.Lane, laneName(e.Lane))
	}
	b := t.open()
	b = append(b, `"ph":"X","name":`...)
	b = appendJSONString(b, e.Name)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(t.pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(e.Lane), 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, e.Start.UnixNano())
	b = append(b, `,"dur":`...)
	b = appendMicros(b, max(e.End.Sub(e.Start).Nanoseconds(), 0))
	sep := `,"args":{`
	for _, a := range e.Args {
		if a.Key == "" {
			continue
		}
		b = append(b, sep...)
		b = appendJSONString(b, a.Key)
		b = append(b, ':')
		b = strconv.AppendInt(b, a.Value, 10)
		sep = ","
	}
	if sep == "," {
		b = append(b, '}')
	}
	t.close(append(b, '}'))
}

// appendJSONString appends s as a JSON string, as encoding/json writes
// it (without HTML escaping): '"' and '\\' escaped, control characters as
// \u00XX, each byte of invalid UTF-8 as U+FFFD, and U+2028 and U+2029
// escaped for JavaScript. It allocates nothing once b has room.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0 // s[start:i] is still to copy as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendMicros writes ns as microseconds with three decimals, exactly.
func appendMicros(b []byte, ns int64) []byte {
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	if frac < 0 {
		frac = -frac
	}
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// open starts an event in the reused buffer.
func (t *Writer) open() []byte {
	b := t.buf[:0]
	if !t.first {
		b = append(b, ",\n"...)
	}
	t.first = false
	return append(b, '{')
}

// close writes the event and keeps the buffer.
func (t *Writer) close(b []byte) {
	t.buf = b
	if t.err == nil {
		_, t.err = t.w.Write(b)
	}
}

// Flush writes buffered events through.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.w.Flush()
	}
	return t.err
}

// Close ends the JSON array and flushes; with Create it closes the file.
// It returns the first write error. Events written after Close are
// dropped.
func (t *Writer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return t.err
	}
	t.closed = true
	if t.err == nil {
		_, t.err = t.w.WriteString("\n]\n")
	}
	if t.err == nil {
		t.err = t.w.Flush()
	}
	if t.c != nil {
		t.err = errors.Join(t.err, t.c.Close())
	}
	return t.err
}
