package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

var crcRE = regexp.MustCompile(`^crc32c:[0-9a-f]{8}$`)

const (
	manifestName = "manifest.json"
	formatName   = "goddp-checkpoint/2" // with checksums; see Note [checksums]
	legacyFormat = "goddp-checkpoint/1" // without; Load accepts it with a warning
	paramsDir    = "params"
	optimDir     = "optimizer"
	extraDir     = "extra"
	maxManifest  = 64 << 20 // bytes; a manifest lists names and shapes only
)

// manifest is manifest.json. Load decodes it into these types only,
// rejecting unknown fields.
type manifest struct {
	Format    string            `json:"format"`
	Step      int               `json:"step"`
	Dtype     string            `json:"dtype,omitempty"`
	Params    []entry           `json:"params"`
	Optimizer optimEntry        `json:"optimizer"`
	Extra     []entry           `json:"extra"`
	Meta      map[string]string `json:"meta"`
	Files     []entry           `json:"files,omitempty"` // Checkpoint.Files: File is Name, beside the manifest
	// Checksum is only ever decoded from a damaged manifest: a whole one
	// has it removed by unsealManifest before decoding.
	Checksum string `json:"checksum,omitempty"`
}

type optimEntry struct {
	Name    string  `json:"name"`
	Step    int     `json:"step"`
	Buffers []entry `json:"buffers"`
}

// entry is one array: its name or key, its file relative to the
// checkpoint directory, its shape, and the file's size and checksum
// (format 2 on).
type entry struct {
	Name   string `json:"name"`
	File   string `json:"file"`
	Shape  []int  `json:"shape"`
	Size   int64  `json:"size,omitempty"`
	CRC32C string `json:"crc32c,omitempty"`
}

// file is one array to write.
type file struct {
	path  string
	shape []int
	data  []float64
}

// newManifest describes c; map entries are sorted by key.
func newManifest(c *Checkpoint) *manifest {
	m := &manifest{Format: formatName, Step: c.Step, Dtype: c.Dtype, Meta: c.Meta,
		Optimizer: optimEntry{Name: c.Optimizer.Name, Step: c.Optimizer.Step}}
	for _, name := range sortedKeys(c.Params) {
		m.Params = append(m.Params,
			entry{Name: name, File: paramsDir + "/" + name + ".npy", Shape: slices.Clone(c.shape(name))})
	}
	m.Optimizer.Buffers = flatEntries(optimDir, c.Optimizer.Buffers)
	m.Extra = flatEntries(extraDir, c.Extra)
	for _, name := range sortedKeys(c.Files) {
		b := c.Files[name]
		m.Files = append(m.Files, entry{Name: name, File: name, Size: int64(len(b)), CRC32C: sumBytes(b)})
	}
	return m
}

// flatEntries names the vectors of vals, in key order, <dir>/<k>.npy.
func flatEntries(dir string, vals map[string][]float64) []entry {
	keys := sortedKeys(vals)
	out := make([]entry, len(keys))
	for i, k := range keys {
		out[i] = entry{Name: k, File: fmt.Sprintf("%s/%d.npy", dir, i), Shape: []int{len(vals[k])}}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// files pairs m's entries with c's data.
func (m *manifest) files(c *Checkpoint) []file {
	var out []file
	for _, e := range m.Params {
		out = append(out, file{e.File, e.Shape, c.Params[e.Name]})
	}
	for _, e := range m.Optimizer.Buffers {
		out = append(out, file{e.File, e.Shape, c.Optimizer.Buffers[e.Name]})
	}
	for _, e := range m.Extra {
		out = append(out, file{e.File, e.Shape, c.Extra[e.Name]})
	}
	return out
}

// entries are pointers to every entry of m, in file order.
func (m *manifest) entries() []*entry {
	var out []*entry
	for _, group := range [][]entry{m.Params, m.Optimizer.Buffers, m.Extra} {
		for i := range group {
			out = append(out, &group[i])
		}
	}
	return out
}

// write writes m, sealed with its own checksum.
func (m *manifest) write(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if b, err = sealManifest(append(b, '\n')); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// readManifest reads and checks a manifest: its format, its dtype, and
// that every entry has a unique name, a valid shape and a file inside the
// checkpoint directory.
func readManifest(path string) (*manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%s is over %d bytes; it is not a manifest Save wrote", path, maxManifest)
	}
	b, sealed, err := unsealManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the manifest", path)
	}
	if m.Format == formatName && !sealed || m.Checksum != "" {
		return nil, fmt.Errorf("%s: %w: its checksum line is missing or damaged", path, ErrDamaged)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}

// checkFiles checks m.Files (Checkpoint.Files) and returns their names.
func (m *manifest) checkFiles() (map[string]bool, error) {
	files := map[string]bool{}
	for _, e := range m.Files {
		if checkFileName(e.Name) != nil || e.File != e.Name || files[e.File] || e.Size <= 0 || e.Size > MaxFileBytes ||
			!crcRE.MatchString(e.CRC32C) {
			return nil, fmt.Errorf("file %q: not a plain file of its own beside the manifest, with a size and checksum",
				e.Name)
		}
		files[e.File] = true
	}
	return files, nil
}

func (m *manifest) check() error {
	switch {
	case m.Format != formatName && m.Format != legacyFormat:
		return fmt.Errorf("format %q; this program reads %q and %q", m.Format, formatName, legacyFormat)
	case m.Step < 0 || m.Optimizer.Step < 0:
		return fmt.Errorf("negative step")
	case m.Dtype != "" && m.Dtype != "float32" && m.Dtype != "float64":
		return fmt.Errorf("dtype %q; want float32, float64 or empty", m.Dtype)
	}
	files, err := m.checkFiles()
	if err != nil {
		return err
	}
	for _, group := range []struct {
		what    string
		dir     string
		entries []entry
	}{{"parameter", paramsDir, m.Params}, {"optimizer buffer", optimDir, m.Optimizer.Buffers},
		{"extra", extraDir, m.Extra}} {
		names := map[string]bool{}
		for _, e := range group.entries {
			if names[e.Name] {
				return fmt.Errorf("two of its %ss are called %q", group.what, e.Name)
			}
			names[e.Name] = true
			if d, base := filepath.Split(filepath.FromSlash(e.File)); d != group.dir+string(filepath.Separator) ||
				base == "" || base == "." || base == ".." || files[e.File] {
				return fmt.Errorf("%s %q: file %q is not a file of its own in %s/", group.what, e.Name, e.File, group.dir)
			}
			files[e.File] = true
			if _, ok := numel(e.Shape); !ok {
				return fmt.Errorf("%s %q: bad shape %v", group.what, e.Name, e.Shape)
			}
			if m.Format == formatName && (e.Size <= 0 || !crcRE.MatchString(e.CRC32C)) {
				return fmt.Errorf("%s %q: no valid size and checksum (size %d, crc32c %q)", group.what, e.Name, e.Size, e.CRC32C)
			}
		}
	}
	return nil
}
