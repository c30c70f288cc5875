package npy

import (
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// ReadHeader stops at the data, so a caller can check the shape first;
// ReadData then reads the data.
func TestReadHeaderThenData(t *testing.T) {
	r := strings.NewReader(goldenF4)
	h, err := ReadHeader(r)
	if err != nil || h.Descr != "<f4" || h.Len() != 6 || !slices.Equal(h.Shape, []int{2, 3}) {
		t.Fatalf("ReadHeader = %+v, %v", h, err)
	}
	if rest := r.Len(); rest != 24 {
		t.Fatalf("ReadHeader left %d bytes, want the 24 of the data", rest)
	}
	a, err := ReadData(r, h)
	if err != nil || len(a.Data) != 24 || !slices.Equal(a.Shape, h.Shape) {
		t.Fatalf("ReadData = %+v, %v", a, err)
	}
	if _, err := ReadData(r, Header{Shape: []int{1}, Descr: "<c8"}); err == nil {
		t.Fatal("ReadData accepted an unsupported dtype")
	}
}

// onlyReader hides everything but Read (a gzip stream, a pipe).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// A stream whose header declares 16 GiB but holds 1 MiB costs about
// 1 MiB, not the 16 GiB declared, and says it is truncated.
func TestReadDataMemoryFollowsTheData(t *testing.T) {
	in := withHeader(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 4), }",
		string(make([]byte, 1<<20)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Read(onlyReader{strings.NewReader(in)})
	runtime.ReadMemStats(&after)
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "data is truncated") {
		t.Fatalf("got %v, want a truncated-data error", err)
	}
	if used := after.TotalAlloc - before.TotalAlloc; used > 16<<20 {
		t.Fatalf("allocated %d MiB for 1 MiB of data", used>>20)
	}
}
