package checkpoint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A second Lock of one directory fails at once naming the holder, from
// another process too; released, the directory can be taken again.
func TestLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	release, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(dir); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second Lock in this process: %v; want ErrLocked naming the holder's pid", err)
	}
	if flock, err := exec.LookPath("flock"); err == nil { // util-linux: another process
		out, err := exec.Command(flock, "--nonblock", lockPath(dir), "true").CombinedOutput()
		if err == nil {
			t.Errorf("another process took the lock while it was held (%s)", out)
		}
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	release, err = Lock(dir)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	release()
}

// Remove deletes the checkpoints of both layouts and killed saves'
// leftovers, and nothing else.
func TestRemove(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, isDir bool) {
		p := filepath.Join(dir, name)
		if isDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"params", "optimizer", "extra", "step-000000100", "step-000000200", ".step-000000300.tmp-123", "notes", "step-1x"} {
		mk(d, true)
	}
	for _, f := range []string{"manifest.json", "latest", ".latest.tmp-99", "README"} {
		mk(f, false)
	}
	if got := Steps(dir); !slices.Equal(got, []int{100, 200}) {
		t.Errorf("Steps = %v", got)
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"README", "notes", "step-1x"}) {
		t.Errorf("left %v; want README, notes, step-1x", left)
	}
	if Exists(dir) {
		t.Error("Exists after Remove")
	}
}

// A manifest that claims a step of a trillion (its checksum resealed, so
// only the number is wrong) is refused as a bad checkpoint.
func TestLoadRefusesAbsurdStep(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, &Checkpoint{Step: 20, Params: map[string][]float64{"w": {1, 2}}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, manifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := unsealManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(body), `"step": 20`, `"step": 1000000000000`, 1)
	if edited == string(body) {
		t.Fatalf("no step in the manifest:\n%s", body)
	}
	sealed, err := sealManifest([]byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, sealed, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrBadCheckpoint) || !strings.Contains(err.Error(), "claims step 1000000000000") {
		t.Fatalf("Load = %v; want ErrBadCheckpoint naming the step", err)
	}
	if err := Save(t.TempDir(), &Checkpoint{Step: MaxStep + 1}); err == nil {
		t.Error("Save of a step past MaxStep succeeded")
	}
}
