package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goddp/ddp/internal/fsync"
	"github.com/goddp/ddp/npy"
	"gorgonia.org/tensor"
)

// SaveList is the file in a --save directory that lists what SaveNPY
// wrote there: Note [a save owns only its files].
const SaveList = ".ddp-train-save"

const saveFormat = "ddp-train-save/1"

// saveRecord is SaveList's JSON.
type saveRecord struct {
	Format string      `json:"format"`
	Files  []savedFile `json:"files"`
}

// savedFile is one file SaveNPY wrote: its name in the directory, its
// size and its CRC-32C.
type savedFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C string `json:"crc32c"`
}

// Note [a save owns only its files]
//
// The directory --save names is the user's (the working directory, their
// home, a mount point), so SaveNPY never replaces or removes it, nor any
// file in it that a save did not write. It writes each <name>.npy as a
// synced temporary file in dir renamed over the old one, so every file is
// always whole; then dir/.ddp-train-save (SaveList, the same way), which
// lists each file with its size and CRC-32C; then it removes the files the
// previous list named and this save did not write (a previous model's),
// and the temporaries of a killed save of these names. A crash mid-save
// leaves every file whole, each either the previous save's or this one's,
// and SaveList naming the last save that completed: a file whose size or
// checksum differs from the list's is from the save that did not. A file
// of one of the names a save would write that is not in the list is
// someone else's: CheckSaveDir refuses the directory up front, naming it.

// SaveNPY writes every parameter to dir as <name>.npy, in the model's
// dtype and with its shape (an MLP weight is [in, out]), and the list of
// what it wrote as dir/.ddp-train-save; dir is created if needed. It
// writes and removes only its own files: Note [a save owns only its
// files].
func (p *Params) SaveNPY(dir string) error {
	if err := p.saveNPY(dir, nil); err != nil {
		return fmt.Errorf("model: saving parameters to %s: %w", dir, err)
	}
	return nil
}

// SaveNPYCard is SaveNPY, and writes card to dir/CardFile beside the
// parameters (listed in dir/.ddp-train-save with them): Note [model
// cards]. card must describe p's model (Card.Check).
func (p *Params) SaveNPYCard(dir string, card Card) error {
	err := card.Check(p.spec)
	if err == nil {
		err = p.saveNPY(dir, card.Marshal())
	}
	if err != nil {
		return fmt.Errorf("model: saving parameters to %s: %w", dir, err)
	}
	return nil
}

func (p *Params) saveNPY(dir string, card []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	prev, _ := readSaveList(dir) // CheckSaveDir refused one not ours
	rec := saveRecord{Format: saveFormat}
	for i, name := range p.Names {
		var buf bytes.Buffer
		if err := npy.Write(&buf, p.Shape(i), p.Nodes[i].Value().Data()); err != nil {
			return fmt.Errorf("writing %s: %w", name+".npy", err)
		}
		if err := writeAtomic(dir, name+".npy", buf.Bytes()); err != nil {
			return fmt.Errorf("writing %s: %w", name+".npy", err)
		}
		rec.Files = append(rec.Files, savedFile{name + ".npy", int64(buf.Len()), crcOf(buf.Bytes())})
	}
	if card != nil {
		if err := writeAtomic(dir, CardFile, card); err != nil {
			return fmt.Errorf("writing %s: %w", CardFile, err)
		}
		rec.Files = append(rec.Files, savedFile{CardFile, int64(len(card)), crcOf(card)})
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(dir, SaveList, append(b, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", SaveList, err)
	}
	if err := fsync.Dir(dir); err != nil {
		return err
	}
	for _, f := range prev.Files {
		if !slices.ContainsFunc(rec.Files, func(g savedFile) bool { return g.Name == f.Name }) {
			os.Remove(filepath.Join(dir, f.Name)) // a previous model's; gone already is fine
		}
	}
	removeKilledSaves(dir, rec.Files)
	return nil
}

// writeAtomic writes b to dir/name through a synced temporary file made
// with O_EXCL in dir and renamed over name: a link at name is replaced,
// never followed.
func writeAtomic(dir, name string, b []byte) error {
	return fsync.WriteFile(filepath.Join(dir, name), func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// removeKilledSaves removes the temporaries writeAtomic left, when its
// process was killed, for the files of this save.
func removeKilledSaves(dir string, files []savedFile) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		for _, f := range append(files, savedFile{Name: SaveList}) {
			rest, ok := strings.CutPrefix(e.Name(), "."+f.Name+".tmp-")
			if ok && rest != "" && strings.Trim(rest, "0123456789") == "" && e.Type().IsRegular() {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// readSaveList reads dir's SaveList; a missing one is an empty record.
func readSaveList(dir string) (saveRecord, error) {
	path := filepath.Join(dir, SaveList)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return saveRecord{}, nil
	}
	if err != nil {
		return saveRecord{}, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return saveRecord{}, fmt.Errorf("%s is not a regular file of at most 1 MiB", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return saveRecord{}, err
	}
	var rec saveRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Format != saveFormat {
		return saveRecord{}, fmt.Errorf("%s is not a list ddp-train --save wrote (format %q)", path, saveFormat)
	}
	for _, f := range rec.Files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) || f.Name == "." || f.Name == ".." || f.Name == SaveList {
			return saveRecord{}, fmt.Errorf("%s names %q, which is not a file name a save writes", path, f.Name)
		}
	}
	return rec, nil
}

// CheckSaveDir reports, before a run, a file in dir that SaveNPY would
// overwrite and that no save wrote: a <name>.npy for one of names (the
// model's parameters, ParamNames) or a model-card.json (CardFile) that
// dir/.ddp-train-save does not list,
// one that is not a regular file (a link is never written through), or a
// .ddp-train-save that is not a save's list. A missing dir is fine. The
// error names the file.
func CheckSaveDir(dir string, names []string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	rec, err := readSaveList(dir)
	if err != nil {
		return fmt.Errorf("%w; move it away, or choose another directory", err)
	}
	files := []string{CardFile}
	for _, name := range names {
		files = append(files, name+".npy")
	}
	for _, name := range files {
		path := filepath.Join(dir, name)
		fi, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file (a link is never written through), and the save would replace it; "+
				"move it away, or choose another directory", path)
		case !slices.ContainsFunc(rec.Files, func(f savedFile) bool { return f.Name == name }):
			return fmt.Errorf("%s exists and an earlier save did not write it (%s does not list it), so the save would "+
				"overwrite someone else's file; move it away, or choose another directory", path, SaveList)
		}
	}
	return nil
}

// crcOf is b's CRC-32C, as checkpoints record it.
func crcOf(b []byte) string {
	return fmt.Sprintf("crc32c:%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// LoadNPY sets every parameter from dir/<name>.npy, as SaveNPY writes
// them (or numpy's np.save, float32 or float64, in C order). Every file
// must exist and have exactly the parameter's shape, and every value must
// be finite. It reads and checks every file before it changes any
// parameter, so on error the model is as it was. Errors name the file
// and wrap ErrBadInit. Files for no parameter are ignored.
//
// Load before ddp.Wrap, or on every rank: Wrap broadcasts rank 0's
// values.
func (p *Params) LoadNPY(dir string) error {
	values := make([][]float64, len(p.Nodes))
	for i, name := range p.Names {
		v, err := p.readNPY(i, filepath.Join(dir, name+".npy"))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadInit, err)
		}
		values[i] = v
	}
	for i, v := range values {
		if err := p.SetValue(i, v); err != nil {
			return fmt.Errorf("%w: %w", ErrBadInit, err)
		}
	}
	return nil
}

// readNPY reads and checks the file for parameter i.
func (p *Params) readNPY(i int, path string) ([]float64, error) {
	want := p.Shape(i)
	a, err := npy.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file; the %s model needs one .npy file per parameter (%s), %s with shape %v",
			path, p.spec.Kind, p.describeFiles(), p.Names[i]+".npy", want)
	}
	if err != nil {
		return nil, err // npy's errors name the file
	}
	if !slices.Equal(a.Shape, want) {
		return nil, fmt.Errorf("%s: shape %v, but the model's %s has shape %v", path, a.Shape, p.Names[i], want)
	}
	v, err := a.Float64s()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for k, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) || p.spec.Dtype == tensor.Float32 && math.Abs(x) > math.MaxFloat32 {
			return nil, fmt.Errorf("%s: element %d is %v; initial values must be finite in %v", path, k, x, p.spec.Dtype)
		}
	}
	return v, nil
}

// describeFiles lists the expected files, abbreviated past a few.
func (p *Params) describeFiles() string {
	const show = 4
	s := ""
	for i, name := range p.Names {
		if i == show {
			return s + fmt.Sprintf(", … %d in all", len(p.Names))
		}
		if i > 0 {
			s += ", "
		}
		s += name + ".npy"
	}
	return s
}
