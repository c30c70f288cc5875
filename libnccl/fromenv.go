package libnccl

import (
	"errors"
	"fmt"
	"strings"
)

// LoadFromEnv loads NCCL and the CUDA driver where a program expects them,
// reading the environment through getenv (os.Getenv in a program; the
// package reads nothing itself):
// GODDP_NCCL_LIBRARY if set, else the system's search path, else the copy
// inside an installed PyTorch (VIRTUAL_ENV, CONDA_PREFIX, /opt/torch/.venv,
// /usr/local, /usr). A failure is one line that says where it looked and
// how to point at the library.
func LoadFromEnv(getenv func(string) string) (*Library, *CUDA, error) {
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	prefixes = append(prefixes, "/opt/torch/.venv", "/usr/local", "/usr")
	lib, err := Load(Options{Path: getenv("GODDP_NCCL_LIBRARY"), PythonPrefixes: prefixes})
	if err != nil {
		return nil, nil, flattened{err}
	}
	cu, err := LoadCUDA(CUDAOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("NCCL %v loaded from %s, but %w", lib.Version(), lib.Path(), flattened{err})
	}
	return lib, cu, nil
}

// flattened is a loader's error (a list of the places tried) in one
// line, still matching errors.Is and errors.As on the original.
type flattened struct{ err error }

func (f flattened) Error() string { return oneLine(f.err) }
func (f flattened) Unwrap() error { return f.err }

// oneLine flattens a loader's error into one line.
func oneLine(err error) string {
	var le *LoadError
	if errors.As(err, &le) {
		return fmt.Sprintf("cannot load %s (tried %s). %s", le.Lib, strings.Join(le.Tried, "; "), le.Hint)
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
