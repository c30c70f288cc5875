package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func entryNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// With Keep 3, five saves leave the last three and a pointer to the
// newest; LoadWith reads the newest.
func TestSaveWithKeepsTheLastK(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	o := Options{Keep: 3}
	for step := 1; step <= 5; step++ {
		if err := SaveWith(dir, sample(step*100), o); err != nil {
			t.Fatal(err)
		}
		if step == 2 { // a save of step 250 killed before its swap
			if err := os.MkdirAll(filepath.Join(dir, ".step-000000250.tmp-4242", paramsDir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{"latest", "step-000000300", "step-000000400", "step-000000500"}
	if got := entryNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("the checkpoint directory holds %v, want %v", got, want)
	}
	c, from, err := LoadWith(dir, o)
	if err != nil || c.Step != 500 || from != filepath.Join(dir, "step-000000500") {
		t.Fatalf("LoadWith: step %v from %s, %v", c, from, err)
	}
	// Load (no fallback) reads the rotated layout too.
	if c, err := Load(dir); err != nil || c.Step != 500 {
		t.Fatalf("Load of a rotated directory: %v, %v", c, err)
	}
	for _, f := range checkpointFiles(t, dir) {
		if strings.Contains(f, ".tmp-") {
			t.Errorf("a temporary file is left: %s", f)
		}
	}
}

// A damaged newest checkpoint: with Keep > 1 LoadWith falls back to the
// newest intact one and logs a warning naming the damaged file; with
// Keep 1 it is an error naming the file. With every checkpoint damaged it
// is an error.
func TestLoadWithFallsBackToTheNewestIntact(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	for step := 1; step <= 3; step++ {
		if err := SaveWith(dir, sample(step), Options{Keep: 3}); err != nil {
			t.Fatal(err)
		}
	}
	flip := func(b []byte) []byte { b[len(b)-3] ^= 4; return b }
	bad3 := filepath.Join(dir, "step-000000003", paramsDir, "fc1.weight.npy")
	damage(t, bad3, flip)
	bad2 := filepath.Join(dir, "step-000000002", manifestName)
	damage(t, bad2, flip)

	core, logs := observer.New(zap.WarnLevel)
	c, from, err := LoadWith(dir, Options{Keep: 3, Logger: zap.New(core)})
	if err != nil || c.Step != 1 || from != filepath.Join(dir, "step-000000001") {
		t.Fatalf("LoadWith past two damaged checkpoints: %v from %s, %v", c, from, err)
	}
	warnings := logs.FilterMessageSnippet("damaged").All()
	if len(warnings) != 2 {
		t.Fatalf("%d warnings, want one per damaged checkpoint: %v", len(warnings), logs.All())
	}
	for i, bad := range []string{bad3, bad2} {
		if e := warnings[i].ContextMap()["error"]; !strings.Contains(e.(string), bad) {
			t.Errorf("warning %d does not name %s: %v", i, bad, warnings[i].ContextMap())
		}
	}

	// Keep 1: no fallback.
	_, _, err = LoadWith(dir, Options{Keep: 1})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), bad3) {
		t.Errorf("LoadWith Keep 1: %v; want the damage of %s", err, bad3)
	}
	if _, err := Load(dir); !errors.Is(err, ErrDamaged) {
		t.Errorf("Load: %v; want the damage", err)
	}

	// Every one damaged.
	damage(t, filepath.Join(dir, "step-000000001", optimDir, "0.npy"), flip)
	_, _, err = LoadWith(dir, Options{Keep: 3})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), bad3) ||
		!strings.Contains(err.Error(), "no older checkpoint") {
		t.Errorf("with every checkpoint damaged: %v", err)
	}
}

// The pointer to the newest checkpoint is checked too: damaged, it is an
// error with Keep 1, and with Keep > 1 a warning and the newest intact
// checkpoint.
func TestDamagedLatestPointer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	for step := 1; step <= 2; step++ {
		if err := SaveWith(dir, sample(step), Options{Keep: 2}); err != nil {
			t.Fatal(err)
		}
	}
	latest := filepath.Join(dir, latestName)
	for how, edit := range edits {
		restore := damage(t, latest, edit)
		if _, _, err := LoadWith(dir, Options{Keep: 1}); !errors.Is(err, ErrBadCheckpoint) ||
			!strings.Contains(err.Error(), latest) {
			t.Errorf("%s: LoadWith Keep 1: %v; want an error naming %s", how, err, latest)
		}
		core, logs := observer.New(zap.WarnLevel)
		c, _, err := LoadWith(dir, Options{Keep: 2, Logger: zap.New(core)})
		if err != nil || c.Step != 2 || logs.FilterMessageSnippet("pointer").Len() != 1 {
			t.Errorf("%s: LoadWith Keep 2: %v, %v, warnings %v", how, c, err, logs.All())
		}
		restore()
	}
	// Pointing at an older checkpoint takes a valid checksum: a flipped
	// digit cannot silently select another one.
	if err := os.WriteFile(latest, []byte("step-000000001 "+sumBytes([]byte("step-000000002"))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadWith(dir, Options{Keep: 1}); !errors.Is(err, ErrDamaged) {
		t.Errorf("a pointer whose checksum is another name's: %v", err)
	}
}

// A run that resumed from an older checkpoint (past damaged newer ones)
// and saves again removes the abandoned newer ones; a checkpoint of the
// older layout (in the directory itself) is removed by the first new
// save, file by file, leaving what it did not write; going back to Keep 1
// keeps one.
func TestSaveWithPrunesAndMigrates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := writeDir(dir, sample(5), writeNPY); err != nil { // the older layout
		t.Fatal(err)
	}
	for _, f := range []string{"README", filepath.Join(paramsDir, "mine.npy")} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("the user's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := Load(dir); err != nil || c.Step != 5 {
		t.Fatalf("Load of the older layout: %v, %v", c, err)
	}
	if err := SaveWith(dir, sample(10), Options{Keep: 2}); err != nil {
		t.Fatal(err)
	}
	if got, want := entryNames(t, dir), []string{"README", "latest", paramsDir, "step-000000010"}; !slices.Equal(got,
		want) {
		t.Errorf("after the first new save: %v, want %v", got, want)
	}
	if got := entryNames(t, filepath.Join(dir, paramsDir)); !slices.Equal(got, []string{"mine.npy"}) {
		t.Errorf("the older checkpoint's params/ holds %v after its removal, want the user's mine.npy alone", got)
	}
	for _, s := range []int{20, 30} {
		if err := SaveWith(dir, sample(s), Options{Keep: 2}); err != nil {
			t.Fatal(err)
		}
	}
	// Resumed from step 20, the run saves step 25.
	if err := SaveWith(dir, sample(25), Options{Keep: 2}); err != nil {
		t.Fatal(err)
	}
	if got, want := entryNames(t, dir), []string{"README", "latest", paramsDir, "step-000000020",
		"step-000000025"}; !slices.Equal(got, want) {
		t.Errorf("after saving step 25 past step 30: %v, want %v", got, want)
	}
	if c, err := Load(dir); err != nil || c.Step != 25 {
		t.Errorf("Load: %v, %v", c, err)
	}
	// Back to Keep 1: one checkpoint, with a warning.
	core, logs := observer.New(zap.WarnLevel)
	if err := SaveWith(dir, sample(26), Options{Keep: 1, Logger: zap.New(core)}); err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessageSnippet("replacing the rotated checkpoints").Len() != 1 {
		t.Errorf("going back to Keep 1 replaced the rotated checkpoints without a warning: %v", logs.All())
	}
	if c, err := Load(dir); err != nil || c.Step != 26 {
		t.Errorf("Load after going back to Keep 1: %v, %v", c, err)
	}
	if got, want := entryNames(t, dir), []string{"README", "latest", paramsDir, "step-000000026"}; !slices.Equal(got,
		want) {
		t.Errorf("after a Keep 1 save: %v, want %v", got, want)
	}
}

func TestExists(t *testing.T) {
	root := t.TempDir()
	single, rotated, leftovers := filepath.Join(root, "single"), filepath.Join(root, "rotated"), filepath.Join(root,
		"leftovers")
	if err := writeDir(single, sample(1), writeNPY); err != nil { // the older layout
		t.Fatal(err)
	}
	if err := SaveWith(rotated, sample(1), Options{Keep: 2}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(leftovers, ".step-000000001.tmp-123", paramsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{single: true, rotated: true, leftovers: false,
		filepath.Join(root, "none"): false} {
		if got := Exists(dir); got != want {
			t.Errorf("Exists(%s) = %v, want %v", filepath.Base(dir), got, want)
		}
	}
}
