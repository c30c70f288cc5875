package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Files are saved beside the manifest, listed in it with their sizes and
// checksums, and come back as they were; a damaged one is ErrDamaged
// naming it; a name of the checkpoint's own is refused.
func TestFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	c := sample(3)
	c.Files = map[string][]byte{"model-card.json": []byte(`{"kind":"mlp"}` + "\n"), "notes": []byte("x")}
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Files, c.Files) {
		t.Fatalf("Files came back as %q, want %q", got.Files, c.Files)
	}
	head, _, err := LoadWith(dir, Options{ManifestOnly: true})
	if err != nil || !reflect.DeepEqual(head.Files, c.Files) || len(head.Params) != 0 || head.Step != 3 ||
		len(head.Shapes["fc1.weight"]) != 2 {
		t.Fatalf("ManifestOnly: %+v, %v", head, err)
	}
	card := filepath.Join(at(dir, 3), "model-card.json")
	if b, err := os.ReadFile(card); err != nil || string(b) != string(c.Files["model-card.json"]) {
		t.Fatalf("%s: %q, %v", card, b, err)
	}
	os.WriteFile(card, []byte(`{"kind":"cnn"}`+"\n"), 0o644)
	if _, err := Load(dir); !errors.Is(err, ErrDamaged) || !errors.Is(err, ErrBadCheckpoint) {
		t.Errorf("Load with a damaged file: %v, want ErrDamaged", err)
	}
	for _, name := range []string{"manifest.json", "params", "a/b", "", ".."} {
		c.Files = map[string][]byte{name: []byte("x")}
		if err := Save(dir, c); err == nil {
			t.Errorf("Save with a file named %q: no error", name)
		}
	}
	c.Files = map[string][]byte{"big": make([]byte, MaxFileBytes+1)}
	if err := Save(dir, c); err == nil {
		t.Error("Save with a file over MaxFileBytes: no error")
	}
}
