package libnccl

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ebitengine/purego"
)

// LibraryName is the soname Load looks for.
const LibraryName = "libnccl.so.2"

// Options says where Load looks for NCCL.
type Options struct {
	// Path, if set, is the only place tried: a file, or a directory
	// holding libnccl.so.2.
	Path string
	// PythonPrefixes are Python installations (a venv such as
	// /opt/torch/.venv, or /usr, /usr/local) whose
	// lib/python3*/site-packages/nvidia/nccl/lib is searched after the
	// system's search path. SitePackages are site-packages (or
	// dist-packages) directories searched the same way, for layouts the
	// prefixes do not cover.
	PythonPrefixes []string
	SitePackages   []string
}

// LoadError says that no library could be opened, where Load looked and
// how to point it at one.
type LoadError struct {
	Lib   string   // "libnccl.so.2"
	Tried []string // each place, with dlopen's message
	Hint  string
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("nccl: cannot load %s; tried:\n  %s\n%s", e.Lib, strings.Join(e.Tried, "\n  "), e.Hint)
}

// ErrNotFound is wrapped by *LoadError.
var ErrNotFound = errors.New("library not found")

// Unwrap makes errors.Is(err, ErrNotFound) true.
func (e *LoadError) Unwrap() error { return ErrNotFound }

const ncclHint = "Point at it with GODDP_NCCL_LIBRARY=/path/to/libnccl.so.2 " +
	"(or the option that sets libnccl.Options.Path), " +
	"add its directory to LD_LIBRARY_PATH, or install it (pip install nvidia-nccl-cu12 or nvidia-nccl-cu13; it also " +
	"comes with PyTorch's CUDA wheels)."

// candidates lists the paths Load tries, in order.
func (o Options) candidates(glob func(string) ([]string, error)) []string {
	if o.Path != "" {
		if strings.HasSuffix(o.Path, ".so") || strings.Contains(filepath.Base(o.Path), ".so.") {
			return []string{o.Path}
		}
		return []string{filepath.Join(o.Path, LibraryName)}
	}
	out := []string{LibraryName} // the system's search path
	var sites []string
	for _, p := range o.PythonPrefixes {
		for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages",
			"lib64/python3*/site-packages"} {
			m, _ := glob(filepath.Join(p, pat))
			sort.Sort(sort.Reverse(sort.StringSlice(m))) // newest python first
			sites = append(sites, m...)
		}
	}
	sites = append(sites, o.SitePackages...)
	seen := map[string]bool{}
	for _, s := range sites {
		c := filepath.Join(s, "nvidia", "nccl", "lib", LibraryName)
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// dlopenFirst opens the first candidate that loads.
func dlopenFirst(lib, hint string, candidates []string) (uintptr, string, error) {
	var tried []string
	for _, c := range candidates {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, c, nil
		}
		what := c
		if !strings.Contains(c, "/") {
			what = c + " (system search path)"
		}
		tried = append(tried, what+": "+err.Error())
	}
	return 0, "", &LoadError{Lib: lib, Tried: tried, Hint: hint}
}

// symbols resolves names in h; a missing name stays 0 (optional symbols
// are checked at call time against the version).
func symbols(h uintptr, names map[string]*uintptr) {
	for name, p := range names {
		if s, err := purego.Dlsym(h, name); err == nil {
			*p = s
		}
	}
}
