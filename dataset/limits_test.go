package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// npyHeader is the header numpy writes for an array of shape and descr,
// without data.
func npyHeader(t *testing.T, descr string, shape ...int) []byte {
	t.Helper()
	var b bytes.Buffer
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := "(" + strings.Join(dims, ", ") + ")"
	if len(shape) == 1 {
		tuple = "(" + dims[0] + ",)"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple)
	pad := 64 - (10+len(dict)+1)%64
	b.WriteString("\x93NUMPY\x01\x00")
	hlen := len(dict) + pad + 1
	b.Write([]byte{byte(hlen), byte(hlen >> 8)})
	b.WriteString(dict + strings.Repeat(" ", pad) + "\n")
	return b.Bytes()
}

// gzipZeros returns a gzip file of head then n MiB of zero bytes, as
// many concatenated gzip members (which gzip readers join): 1 GiB of
// data in about a megabyte, without compressing a gigabyte.
func gzipZeros(t *testing.T, head []byte, mib int) []byte {
	t.Helper()
	out := gz(t, head)
	member := gz(t, make([]byte, 1<<20))
	for range mib {
		out = append(out, member...)
	}
	return out
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Note [headers first]: a small gzip .npy that declares, and holds, 1 GiB
// of features (134217728×2 float32), with 8 labels, fails on the counts
// before a byte of data is read; so does one that declares more than it
// holds, and one that declares more than MaxValues.
func TestDeclaredSizesCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	const rows = 134217728 // ×2 float32 = 1 GiB
	big := put(t, dir, "big.npy.gz", gzipZeros(t, npyHeader(t, "<f4", rows, 2), 1024))
	short := put(t, dir, "short.npy.gz", gzipZeros(t, npyHeader(t, "<f4", rows, 2), 1))
	eight := put(t, dir, "y8.npy", npyBytes(t, []int{8}, []int64{0, 1, 2, 3, 0, 1, 2, 3}))
	yRows := put(t, dir, "yrows.npy.gz", gzipZeros(t, npyHeader(t, "<i8", rows), 0))
	huge := put(t, dir, "huge.npy", npyHeader(t, "<f4", MaxValues+1, 1))
	yHuge := put(t, dir, "yhuge.npy", npyHeader(t, "<i8", MaxValues+1))
	imgs := put(t, dir, "images.gz", gzipZeros(t, idx([]uint32{1 << 20, 28, 28}, nil), 1))
	labels8 := put(t, dir, "labels8", idx([]uint32{8}, make([]byte, 8)))
	for _, c := range []struct {
		name, x, y, blame, want string
	}{
		{"1 GiB of features, 8 labels", big, eight, eight, "has 8 labels but " + big + " has 134217728 samples"},
		{"more declared than held", short, yRows, short, "data is truncated"},
		{"more than MaxValues", huge, yHuge, huge, "more than the 2147483647 values a data set may hold"},
		{"IDX: 1Mi images, 8 labels", imgs, labels8, labels8, "has 8 labels but " + imgs + " has 1048576 samples"},
	} {
		var err error
		used := allocated(func() { _, err = Load(c.x, c.y, 0) })
		var ie *InputError
		if !errors.As(err, &ie) || ie.Path != c.blame || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v; want an *InputError naming %s and saying %q", c.name, err, c.blame, c.want)
		}
		if used > 16<<20 {
			t.Errorf("%s: allocated %d MiB to refuse it", c.name, used>>20)
		}
	}
}
