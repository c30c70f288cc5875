package launch

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// Every worker inherits Spec.ExtraFiles as descriptors 3, 4, ...: here
// each writes its rank into the one pipe.
func TestWorkersInheritExtraFiles(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = Run(context.Background(),
		Spec{N: 3, Path: "/bin/sh", Args: []string{"-c", `echo "rank $RANK" >&3`}, ExtraFiles: []*os.File{w}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(strings.ReplaceAll(string(b), "rank ", "rank_"))
	slices.Sort(lines)
	if !slices.Equal(lines, []string{"rank_0", "rank_1", "rank_2"}) {
		t.Errorf("the pipe received %q", b)
	}
}
