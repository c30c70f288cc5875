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
	t.meta("process_name", -1, fmt.Sprintf("rank %d", rank))
	t.meta("process_sort_index", -1, strconv.Itoa(rank))
	return t
}

// Create writes a trace for rank to a new file at path.
func Create(path string, rank int) (*Writer, error) {
	f, err := os.Create(path)
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
	t.meta("thread_name", lane, name)
	t.meta("thread_sort_index", lane, strconv.Itoa(lane))
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

// meta writes a metadata event; value is a name or a sort index.
func (t *Writer) meta(name string, lane int, value string) {
	b := t.open()
	b = append(b, `"ph":"M","name":"`...)
	b = append(b, name...)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, int64(t.pid), 10)
	if lane >= 0 {
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(lane), 10)
	}
	if _, err := strconv.Atoi(value); err == nil {
		b = append(b, `,"args":{"sort_index":`...)
		b = append(b, value...)
	} else {
		b = append(b, `,"args":{"name":`...)
		b = strconv.AppendQuote(b, value)
	}
	t.close(append(b, "}}"...))
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
	b = strconv.AppendQuote(b, e.Name)
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
		b = strconv.AppendQuote(b, a.Key)
		b = append(b, ':')
		b = strconv.AppendInt(b, a.Value, 10)
		sep = ","
	}
	if sep == "," {
		b = append(b, '}')
	}
	t.close(append(b, '}'))
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
