package checkpoint

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// checkpointFiles lists every regular file under dir, relative to it.
func checkpointFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// damage applies edit to the file at path and returns a function that
// puts the original back.
func damage(t *testing.T, path string, edit func([]byte) []byte) (restore func()) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(slices.Clone(orig)), 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// edits are the kinds of damage each file gets, one at a time.
var edits = map[string]func(b []byte) []byte{
	"first bit":  func(b []byte) []byte { b[0] ^= 1; return b },
	"middle bit": func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b },
	"last byte":  func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b },
	"4 bytes overwritten mid-file": func(b []byte) []byte {
		copy(b[len(b)/2:], []byte{0xde, 0xad, 0xbe, 0xef})
		return b
	},
	"truncated": func(b []byte) []byte { return b[:len(b)-1] },
}

// Every file of a checkpoint, damaged in any of several ways, one file
// and one way at a time, makes Load fail with an error that names the
// file; the undamaged checkpoint loads after each.
func TestEveryDamagedFileIsCaught(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, sample(3)); err != nil {
		t.Fatal(err)
	}
	files := checkpointFiles(t, dir)
	if len(files) != 9 { // latest, manifest, 2 params, 4 optimizer buffers, 1 extra
		t.Fatalf("the sample checkpoint has files %v", files)
	}
	for _, f := range files {
		path := filepath.Join(dir, f)
		for how, edit := range edits {
			restore := damage(t, path, edit)
			_, err := Load(dir)
			switch {
			case err == nil:
				t.Errorf("%s, %s: Load succeeded", f, how)
			case !errors.Is(err, ErrBadCheckpoint):
				t.Errorf("%s, %s: %v does not wrap ErrBadCheckpoint", f, how, err)
			case !strings.Contains(err.Error(), path):
				t.Errorf("%s, %s: the error does not name the file: %v", f, how, err)
			}
			restore()
		}
		if _, err := Load(dir); err != nil {
			t.Fatalf("after restoring %s: %v", f, err)
		}
	}
}

// A flipped bit anywhere in a parameter file's data (not only in its
// header) is a checksum mismatch, reported as ErrDamaged.
func TestDamagedDataIsAChecksumMismatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, sample(3)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(at(dir, 3), paramsDir, "fc1.weight.npy")
	size := len(mustRead(t, path))
	for i := size - 48; i < size; i++ { // the 6 float64s
		restore := damage(t, path, func(b []byte) []byte { b[i] ^= 0x80; return b })
		_, err := Load(dir)
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "checksum") {
			t.Errorf("byte %d flipped: %v; want a checksum mismatch", i, err)
		}
		restore()
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The manifest records a size and a CRC-32C for every file, and its own
// checksum last.
func TestManifestRecordsChecksums(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, sample(3)); err != nil {
		t.Fatal(err)
	}
	b := mustRead(t, filepath.Join(at(dir, 3), manifestName))
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Format != "goddp-checkpoint/2" || !crcRE.MatchString(m.Checksum) {
		t.Errorf("format %q, checksum %q", m.Format, m.Checksum)
	}
	for _, e := range m.entries() {
		sum, size, err := sumFile(filepath.Join(at(dir, 3), e.File))
		if err != nil || sum != e.CRC32C || size != e.Size {
			t.Errorf("%s: recorded %s/%d, file %s/%d (%v)", e.File, e.CRC32C, e.Size, sum, size, err)
		}
	}
}

// A checkpoint of format 1 (no checksums), in the layout of the versions
// that wrote it (the checkpoint in the directory itself), loads, with a
// warning.
func TestLegacyCheckpointLoadsWithAWarning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	want := sample(4)
	if err := writeDir(dir, want, writeNPY); err != nil {
		t.Fatal(err)
	}
	b := mustRead(t, filepath.Join(dir, manifestName))
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.Format, m.Checksum = legacyFormat, ""
	for _, e := range m.entries() {
		e.Size, e.CRC32C = 0, ""
	}
	old, _ := json.MarshalIndent(&m, "", "  ")
	if strings.Contains(string(old), "crc32c") {
		t.Fatalf("the format-1 manifest still has checksums:\n%s", old)
	}
	if err := os.WriteFile(filepath.Join(dir, manifestName), append(old, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	got, from, err := LoadWith(dir, Options{Logger: zap.New(core)})
	if err != nil || from != dir {
		t.Fatalf("LoadWith a format-1 checkpoint: %v (from %s)", err, from)
	}
	want.Shapes["fc1.bias"] = []int{3}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v, want %+v", got, want)
	}
	if logs.FilterMessageSnippet("before checkpoints had checksums").Len() != 1 {
		t.Errorf("no warning about the missing checksums: %v", logs.All())
	}
	// A format-2 manifest without its checksum line is damaged, not old.
	m.Format = formatName
	m2, _ := json.MarshalIndent(&m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, manifestName), append(m2, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrDamaged) {
		t.Errorf("a format-2 manifest without a checksum: %v", err)
	}
}
