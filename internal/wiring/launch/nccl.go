package launch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goddp/ddp/nccl"
)

// LoadNCCL loads NCCL and the CUDA driver for a cmd/ or bench/ program's
// --backend nccl, reading the environment through getenv (os.Getenv):
// GODDP_NCCL_LIBRARY if set, else the system's search path, else the copy
// inside an installed PyTorch (VIRTUAL_ENV, CONDA_PREFIX, /opt/torch/.venv,
// /usr/local, /usr). A failure is one line that says where it looked and
// how to point at the library.
func LoadNCCL(getenv func(string) string) (*nccl.Library, *nccl.CUDA, error) {
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	prefixes = append(prefixes, "/opt/torch/.venv", "/usr/local", "/usr")
	lib, err := nccl.Load(nccl.Options{Path: getenv("GODDP_NCCL_LIBRARY"), PythonPrefixes: prefixes})
	if err != nil {
		return nil, nil, fmt.Errorf("--backend nccl: %s", oneLine(err))
	}
	cu, err := nccl.LoadCUDA(nccl.CUDAOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("--backend nccl: NCCL %v loaded from %s, but %s", lib.Version(), lib.Path(), oneLine(err))
	}
	return lib, cu, nil
}

// oneLine flattens a loader's error (a list of the places tried) into
// one line.
func oneLine(err error) string {
	var le *nccl.LoadError
	if errors.As(err, &le) {
		return fmt.Sprintf("cannot load %s (tried %s). %s", le.Lib, strings.Join(le.Tried, "; "), le.Hint)
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
