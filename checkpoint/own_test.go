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
		out, err := exec.Command(flock, "--nonblock", filepath.Join(dir, lockName), "true").CombinedOutput()
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
// leftovers, and nothing else: not the user's files, nor files of our
// names that a checkpoint did not write.
func TestRemove(t *testing.T) {
	dir := t.TempDir()
	if err := writeDir(dir, sample(1), writeNPY); err != nil { // the older layout
		t.Fatal(err)
	}
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
	for _, d := range []string{"step-000000100", "step-000000200", ".step-000000300.tmp-123", "notes", "step-1x"} {
		mk(d, true)
	}
	for _, f := range []string{"latest", ".latest.tmp-99", "README", ".bashrc.tmp-1",
		filepath.Join(paramsDir, "mine.npy")} {
		mk(f, false)
	}
	if err := os.WriteFile(filepath.Join(dir, "latest"), []byte("step-000000200 x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Steps(dir); !slices.Equal(got, []int{100, 200}) {
		t.Errorf("Steps = %v", got)
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if got, want := entryNames(t, dir), []string{".bashrc.tmp-1", "README", "notes", paramsDir,
		"step-1x"}; !slices.Equal(got, want) {
		t.Errorf("left %v; want %v", got, want)
	}
	if got := entryNames(t, filepath.Join(dir, paramsDir)); !slices.Equal(got, []string{"mine.npy"}) {
		t.Errorf("left %v in params/; want the user's mine.npy alone", got)
	}
	if Exists(dir) {
		t.Error("Exists after Remove")
	}
}

// Saves into a directory that holds the user's files (their home, the
// working directory, a mount point) never replace the directory or touch
// those files, whatever Keep.
func TestSaveTouchesOnlyItsOwnFiles(t *testing.T) {
	dir := t.TempDir()
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	user := map[string]string{"README": "notes", "params.npy": "not ours", filepath.Join("other", "w"): "x",
		".step-notes": "y"}
	for f, body := range user {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, keep := range []int{1, 1, 3, 3, 3, 3, 1} {
		if err := SaveWith(dir, sample(i+1), Options{Keep: keep}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.Stat(dir)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the directory itself was replaced (%v)", err)
	}
	for f, body := range user {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != body {
			t.Errorf("the user's %s: %q, %v; want %q", f, b, err, body)
		}
	}
	if got, want := entryNames(t, dir), []string{".step-notes", "README", "latest", "other", "params.npy",
		"step-000000007"}; !slices.Equal(got, want) {
		t.Errorf("the directory holds %v, want %v", got, want)
	}
	if err := CheckDir(dir); err != nil {
		t.Errorf("CheckDir of a directory of our checkpoints and the user's files: %v", err)
	}
}

// CheckDir names a file that a save would overwrite or remove and that
// no checkpoint wrote.
func TestCheckDirRefusesForeignFiles(t *testing.T) {
	for name, plant := range map[string]func(dir string) error{
		manifestName: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, manifestName), []byte(`{"name": "my web app"}`), 0o644)
		},
		latestName: func(dir string) error { return os.WriteFile(filepath.Join(dir, latestName), []byte("v2.1\n"), 0o644) },
		"step-000000001": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "step-000000001"), []byte("a file"), 0o644)
		},
		"step-000000002": func(dir string) error {
			return os.MkdirAll(filepath.Join(dir, "step-000000002", "photos"),
				0o755)
		},
		lockName: func(dir string) error { return os.Symlink("/etc/passwd", filepath.Join(dir, lockName)) },
	} {
		dir := t.TempDir()
		if err := plant(dir); err != nil {
			t.Fatal(err)
		}
		err := CheckDir(dir)
		if !errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), filepath.Join(dir, name)) {
			t.Errorf("%s planted: CheckDir gave %v; want ErrNotOurs naming it", name, err)
		}
	}
	if err := CheckDir(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
}

// Every path to a directory is the same lock: a second Lock through a
// symbolic link to it is refused.
func TestLockThroughASymlink(t *testing.T) {
	root := t.TempDir()
	dir, link := filepath.Join(root, "ck"), filepath.Join(root, "ck2")
	release, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := os.Symlink("ck", link); err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(link); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock through a symbolic link to a held directory: %v; want ErrLocked", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".ck.lock")); !os.IsNotExist(err) {
		t.Errorf("a lock file beside the directory: %v", err)
	}
}

// A link planted where the lock file goes (another user's, in a shared
// directory) is refused, and what it points at is not touched.
func TestLockRefusesAPlantedLink(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "ck")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, plant := range []func(string) error{
		func(p string) error { return os.Symlink(victim, p) },
		func(p string) error { return os.Link(victim, p) },
	} {
		lock := filepath.Join(dir, lockName)
		if err := plant(lock); err != nil {
			t.Fatal(err)
		}
		if release, err := Lock(dir); err == nil || !strings.Contains(err.Error(), lock) {
			if err == nil {
				release()
			}
			t.Errorf("Lock with a link planted at %s: %v; want an error naming it", lock, err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious" {
			t.Errorf("the link's target was changed: %q", b)
		}
		os.Remove(lock)
	}
}

// A manifest that claims a step of a trillion (its checksum resealed, so
// only the number is wrong) is refused as a bad checkpoint.
func TestLoadRefusesAbsurdStep(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, &Checkpoint{Step: 20, Params: map[string][]float64{"w": {1, 2}}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(at(dir, 20), manifestName)
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
	if _, err := Load(dir); !errors.Is(err, ErrBadCheckpoint) ||
		!strings.Contains(err.Error(), "claims step 1000000000000") {
		t.Fatalf("Load = %v; want ErrBadCheckpoint naming the step", err)
	}
	if err := Save(t.TempDir(), &Checkpoint{Step: MaxStep + 1}); err == nil {
		t.Error("Save of a step past MaxStep succeeded")
	}
}
