package bounded

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A stream that ends before the length it claims costs about what it
// held, however much it claimed.
func TestShortStreamCostsWhatArrived(t *testing.T) {
	const arrived = 10 << 20
	for _, claim := range []int64{arrived + 1, 1 << 40} {
		var got int64
		var data []byte
		var err error
		src := bytes.NewReader(make([]byte, arrived))
		used := allocated(func() { data, got, err = ReadFull(src, claim, false) })
		if data != nil || got != arrived || err != nil {
			t.Fatalf("claim %d: got %d bytes, %d arrived, %v; want nil, %d, nil", claim, len(data), got, err, arrived)
		}
		if limit := uint64(arrived + Chunk + 1<<20); used > limit {
			t.Errorf("claim %d: allocated %d bytes for %d that arrived; want at most %d", claim, used, arrived, limit)
		}
	}
}

// A whole stream comes back intact, read in chunks or at once.
func TestReadFull(t *testing.T) {
	src := make([]byte, 3*Chunk+12345)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, n := range []int64{0, 1, Chunk, Chunk + 1, int64(len(src))} {
		for _, sized := range []bool{false, true} {
			r := iotest.HalfReader(bytes.NewReader(src)) // short reads
			data, got, err := ReadFull(r, n, sized)
			if err != nil || got != n || !bytes.Equal(data, src[:n]) {
				t.Fatalf("n %d sized %v: %d bytes, got %d, %v", n, sized, len(data), got, err)
			}
			if n > Chunk && !sized {
				r := bytes.NewReader(src)
				if used := allocated(func() { ReadFull(r, n, false) }); used > uint64(2*n+Chunk) {
					t.Errorf("n %d: allocated %d bytes; want at most 2n+Chunk", n, used)
				}
			}
		}
	}
}

// Read errors other than the end of the stream are returned.
func TestReadFullError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom))
	if data, got, err := ReadFull(r, 2*Chunk, false); data != nil || got != 3 || !errors.Is(err, boom) {
		t.Fatalf("got %q, %d, %v; want nil, 3, boom", data, got, err)
	}
	if _, _, err := ReadFull(strings.NewReader(""), -1, false); err == nil {
		t.Fatal("a negative length was accepted")
	}
}
