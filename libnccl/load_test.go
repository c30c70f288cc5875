package libnccl

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadMissingSaysWhereAndHow(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(Options{Path: filepath.Join(dir, "libnccl.so.2")})
	var le *LoadError
	if !errors.As(err, &le) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a missing file: %v, want a *LoadError wrapping ErrNotFound", err)
	}
	for _, want := range []string{dir, "GODDP_NCCL_LIBRARY", "LD_LIBRARY_PATH", "pip install"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if len(le.Tried) != 1 {
		t.Errorf("an explicit path must be the only place tried; tried %v", le.Tried)
	}
}

func TestLoadNotALibrary(t *testing.T) {
	// A directory given as Path means the library inside it.
	dir := t.TempDir()
	_, err := Load(Options{Path: dir})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, LibraryName)) {
		t.Fatalf("Load(dir) = %v, want it to try %s", err, filepath.Join(dir, LibraryName))
	}
}

func TestCandidatesOrder(t *testing.T) {
	glob := func(pat string) ([]string, error) {
		if strings.HasPrefix(pat, "/venv/lib/python3*/site-packages") {
			return []string{"/venv/lib/python3.11/site-packages", "/venv/lib/python3.12/site-packages"}, nil
		}
		return nil, nil
	}
	got := Options{PythonPrefixes: []string{"/venv"},
		SitePackages: []string{"/sp", "/venv/lib/python3.12/site-packages"}}.candidates(glob)
	want := []string{
		"libnccl.so.2",
		"/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
		"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
		"/sp/nvidia/nccl/lib/libnccl.so.2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("candidates:\n got %q\nwant %q", got, want)
	}
	if got := (Options{Path: "/x/libnccl.so.2.27.3",
		PythonPrefixes: []string{"/venv"}}).candidates(glob); !reflect.DeepEqual(got, []string{"/x/libnccl.so.2.27.3"}) {
		t.Fatalf("explicit path candidates = %q", got)
	}
}

func TestLoadCUDAMissing(t *testing.T) {
	_, err := LoadCUDA(CUDAOptions{Path: "/nonexistent/libcuda.so.1"})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Fatalf("LoadCUDA of a missing file: %v", err)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	err := error(&Error{Func: "ncclAllReduce", Code: RemoteError, Desc: "remote process exited", Detail: "peer 3"})
	if !errors.Is(err, RemoteError) || errors.Is(err, SystemError) {
		t.Fatalf("errors.Is on %v", err)
	}
	if ResultOf(err) != RemoteError || ResultOf(nil) != Success || ResultOf(errors.New("x")) != InternalError {
		t.Fatal("ResultOf")
	}
	if s := err.Error(); !strings.Contains(s, "ncclAllReduce") || !strings.Contains(s, "ncclRemoteError") ||
		!strings.Contains(s, "peer 3") {
		t.Fatalf("message %q", s)
	}
	for r := Success; r <= Timeout; r++ {
		if strings.Contains(r.String(), "(") {
			t.Errorf("result %d has no name", r)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, c := range []struct {
		v       Version
		a, b, p int
		s       string
	}{{MakeVersion(2, 27, 3), 2, 27, 3, "2.27.3"}, {MakeVersion(2, 8, 4), 2, 8, 4, "2.8.4"}, {21400, 2, 14, 0, "2.14.0"}} {
		a, b, p := c.v.Parts()
		if a != c.a || b != c.b || p != c.p || c.v.String() != c.s {
			t.Errorf("%d: %d.%d.%d %s", c.v, a, b, p, c.v)
		}
	}
	if MakeVersion(2, 27, 3) != 22703 || MakeVersion(2, 8, 4) != 2804 {
		t.Fatal("MakeVersion")
	}
}

func TestFloat32ToHalf(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {1e6, 0x7c00}, {5.960464477539063e-08, 1},
		{0.1, 0x2e66}} {
		if got := Float32ToHalf(c.f); got != c.h {
			t.Errorf("Float32ToHalf(%g) = %#x, want %#x", c.f, got, c.h)
		}
	}
}

func TestConfigLayout(t *testing.T) {
	// ncclConfig_t's fields up to splitShare sit at these offsets on LP64.
	var c config
	offs := []uintptr{0, 8, 12, 16, 20, 24, 28, 32, 40}
	got := []uintptr{offsetOf(&c, &c.size), offsetOf(&c, &c.magic), offsetOf(&c, &c.version), offsetOf(&c, &c.blocking),
		offsetOf(&c, &c.cgaClusterSize), offsetOf(&c, &c.minCTAs), offsetOf(&c, &c.maxCTAs), offsetOf(&c, &c.netName),
		offsetOf(&c, &c.splitShare)}
	if !reflect.DeepEqual(got, offs) {
		t.Fatalf("offsets %v, want %v", got, offs)
	}
}
