package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goddp/ddp/checkpoint/atomicdir"
	"github.com/goddp/ddp/npy"
	"github.com/goddp/ddp/optim"
	"go.uber.org/zap"
)

// ErrBadCheckpoint is wrapped by errors about a checkpoint directory that
// is missing, damaged or not a checkpoint.
var ErrBadCheckpoint = errors.New("checkpoint: bad checkpoint")

// ErrDamaged is wrapped, with ErrBadCheckpoint, by errors about a
// checkpoint file whose contents are not what the manifest recorded: a
// checksum or size that does not match, or a manifest whose own checksum
// does not. The error names the file.
var ErrDamaged = errors.New("damaged")

// ErrIncompatible is wrapped by Restore's errors about a checkpoint of
// another model, dtype or optimizer than the run's.
var ErrIncompatible = errors.New("checkpoint: checkpoint does not match this run")

// Checkpoint is everything a run needs to continue exactly. Capture
// fills every field a model and optimizer have; Load fills Shapes and
// Dtype from what Save recorded.
type Checkpoint struct {
	Step      int                  // training steps completed; a resumed run's next step is Step+1
	Params    map[string][]float64 // each parameter's values by name, row-major
	Shapes    map[string][]int     // optional: parameter shapes; a parameter without one is saved as a vector
	Dtype     string               // optional: the model's dtype, "float32" or "float64"; Restore checks it
	Optimizer optim.State          // the optimizer's state
	Extra     map[string][]float64 // other state, e.g. a comm hook's; keys are free-form
	Meta      map[string]string    // free-form settings to check a resume against, e.g. "world_size"
	// Files are small files saved beside the manifest, by plain file name
	// (a model card, model.CardFile), at most MaxFileBytes each, checksummed
	// and verified as the arrays are.
	Files map[string][]byte
}

// MaxFileBytes bounds each of Checkpoint.Files.
const MaxFileBytes = 1 << 20

// writeFunc writes one .npy file; tests replace it to inject failures.
type writeFunc func(path string, shape []int, data []float64) error

func writeNPY(path string, shape []int, data []float64) error {
	return npy.WriteFile(path, shape, data)
}

// Save writes c to dir, keeping one checkpoint: SaveWith with the zero
// Options. dir is created if needed and never replaced or removed; Save
// writes and deletes only its own files in it (see the package
// documentation's Layout and Atomicity). If Save fails, or the process
// dies during it, dir still holds the previous checkpoint, whole.
func Save(dir string, c *Checkpoint) error { return SaveWith(dir, c, Options{}) }

// writeDir writes c as one checkpoint into the directory path, atomically
// (atomicdir.Write: a temporary directory beside path, in path's parent,
// every file synced, then swapped in for path). Its layout: manifest.json
// (step, dtype, names, shapes, each file's size and CRC-32C, and its own
// checksum on its last line; see Note [checksums]), then
// params/<name>.npy, optimizer/<k>.npy and extra/<k>.npy, all float64
// (which holds float32 values exactly).
func writeDir(path string, c *Checkpoint, write writeFunc) error {
	m := newManifest(c)
	return atomicdir.Write(path, func(tmp string) error {
		for _, sub := range []string{paramsDir, optimDir, extraDir} {
			if err := os.Mkdir(filepath.Join(tmp, sub), 0o755); err != nil {
				return err
			}
		}
		for _, e := range m.Files {
			if err := os.WriteFile(filepath.Join(tmp, e.File), c.Files[e.Name], 0o644); err != nil {
				return fmt.Errorf("writing %s: %w", e.File, err)
			}
		}
		entries := m.entries()
		for i, f := range m.files(c) {
			path := filepath.Join(tmp, f.path)
			if err := write(path, f.shape, f.data); err != nil {
				return fmt.Errorf("writing %s: %w", f.path, err)
			}
			sum, size, err := sumFile(path)
			if err != nil {
				return fmt.Errorf("reading back %s: %w", f.path, err)
			}
			entries[i].CRC32C, entries[i].Size = sum, size
		}
		return m.write(filepath.Join(tmp, manifestName))
	})
}

// Load reads the checkpoint Save (or SaveWith) wrote to dir, checking the
// manifest's own checksum and that every file the manifest names exists
// with the size, checksum and shape it gives: an error names the first
// file that differs, and wraps ErrBadCheckpoint (and ErrDamaged when the
// contents differ). It does not fall back to an older checkpoint; LoadWith
// does, with Options.Keep > 1.
func Load(dir string) (*Checkpoint, error) {
	c, _, err := LoadWith(dir, Options{})
	return c, err
}

// loadOne reads the checkpoint in dir itself (not a rotated layout).
func loadOne(dir string, o Options) (*Checkpoint, error) {
	m, err := readManifest(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s; is it a checkpoint directory? (%v)", ErrBadCheckpoint, dir, manifestName,
			err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadCheckpoint, dir, err)
	}
	if m.Step < 0 || m.Step > MaxStep || m.Optimizer.Step < 0 || m.Optimizer.Step > MaxStep {
		return nil, fmt.Errorf("%w: %s: the manifest claims step %d (optimizer step %d); a step lies in [0, %d]",
			ErrBadCheckpoint, dir, m.Step, m.Optimizer.Step, MaxStep)
	}
	c := &Checkpoint{Step: m.Step, Dtype: m.Dtype, Meta: m.Meta,
		Params: map[string][]float64{}, Shapes: map[string][]int{}, Extra: map[string][]float64{}}
	c.Optimizer = optim.State{Name: m.Optimizer.Name, Step: m.Optimizer.Step, Buffers: map[string][]float64{}}
	if m.Format == legacyFormat {
		o.logger().Warn("this checkpoint was written before checkpoints had checksums: its files cannot be verified; "+
			"resuming from it as it is (the next checkpoint written will have them)",
			zap.String("checkpoint", dir), zap.String("format", m.Format))
	}
	read := func(e entry) ([]float64, error) {
		data, err := readNPY(filepath.Join(dir, e.File), e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
		}
		return data, nil
	}
	for _, e := range m.Params {
		c.Shapes[e.Name] = e.Shape
	}
	if c.Files, err = readFiles(dir, m.Files); err != nil {
		return nil, err
	}
	if o.ManifestOnly {
		return c, nil
	}
	for _, group := range []struct {
		entries []entry
		into    map[string][]float64
	}{{m.Params, c.Params}, {m.Optimizer.Buffers, c.Optimizer.Buffers}, {m.Extra, c.Extra}} {
		for _, e := range group.entries {
			if group.into[e.Name], err = read(e); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// readFiles reads and verifies the manifest's Files; nil for none.
func readFiles(dir string, entries []entry) (map[string][]byte, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := map[string][]byte{}
	for _, e := range entries {
		path := filepath.Join(dir, e.File)
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
		case int64(len(b)) != e.Size:
			return nil, fmt.Errorf("%w: %s: %w: it is %d bytes, but the manifest recorded %d", ErrBadCheckpoint, path,
				ErrDamaged, len(b), e.Size)
		case sumBytes(b) != e.CRC32C:
			return nil, fmt.Errorf("%w: %s: %w: its checksum is %s, but the manifest recorded %s", ErrBadCheckpoint, path,
				ErrDamaged, sumBytes(b), e.CRC32C)
		}
		out[e.Name] = b
	}
	return out, nil
}

// readNPY reads a float64 array that must have e's size, checksum (where
// e records them) and shape.
func readNPY(path string, e entry) ([]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if e.CRC32C != "" {
		if int64(len(b)) != e.Size {
			return nil, fmt.Errorf("%s: %w: it is %d bytes, but the manifest recorded %d", path, ErrDamaged, len(b), e.Size)
		}
		if got := sumBytes(b); got != e.CRC32C {
			return nil, fmt.Errorf("%s: %w: its checksum is %s, but the manifest recorded %s", path, ErrDamaged, got, e.CRC32C)
		}
	}
	a, err := npy.Read(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !slices.Equal(a.Shape, e.Shape) {
		return nil, fmt.Errorf("%s: shape %v, but the manifest says %v", path, a.Shape, e.Shape)
	}
	return a.Float64s()
}

// Capture takes a checkpoint of a run after step training steps: copies
// of p's values, with their shapes and dtype, and of opt's state. Take it
// between steps (after the optimizer's Step), on one rank: every rank
// holds the same values and state.
func Capture(step int, p Model, opt optim.Optimizer) *Checkpoint {
	c := &Checkpoint{Step: step, Params: map[string][]float64{}, Shapes: map[string][]int{},
		Dtype: p.Dtype(), Optimizer: opt.State()}
	for i := range p.Len() {
		c.Params[p.Name(i)], c.Shapes[p.Name(i)] = p.Value(i), p.Shape(i)
	}
	return c
}

// Restore puts c's parameter values into p and its state into opt, after
// checking that c is a checkpoint of the same model (the same parameter
// names, sizes, and shapes and dtype where c records them) and optimizer;
// on error it changes neither, and the error wraps ErrIncompatible.
// Restore on every rank before ddp.Wrap (or on rank 0, as Wrap
// broadcasts rank 0's values, but the optimizer on every rank). The run
// then continues with step c.Step+1.
func (c *Checkpoint) Restore(p Model, opt optim.Optimizer) error {
	incompatible := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrIncompatible, fmt.Sprintf(format, args...))
	}
	if want := p.Dtype(); c.Dtype != "" && want != "" && c.Dtype != want {
		return incompatible("it holds a %s model and this run's is %s; resume with --dtype %s", c.Dtype, want, c.Dtype)
	}
	if len(c.Params) != p.Len() {
		return incompatible("it holds %d parameters and this run's model has %d (%v); resume with the same model flags",
			len(c.Params), p.Len(), names(p))
	}
	for i := range p.Len() {
		name := p.Name(i)
		v, ok := c.Params[name]
		shape, recorded := c.Shapes[name]
		n, _ := numel(p.Shape(i))
		switch {
		case !ok:
			return incompatible("it has no parameter %s; resume with the same model flags", name)
		case recorded && !slices.Equal(shape, p.Shape(i)):
			return incompatible("its %s has shape %v and this run's has %v; resume with the same model flags", name, shape,
				p.Shape(i))
		case len(v) != n:
			return incompatible("its %s has %d values and this run's has %d; resume with the same model flags", name, len(v), n)
		}
	}
	if c.Optimizer.Name != "" && c.Optimizer.Name != opt.Name() {
		return incompatible("it was written by a run with the %s optimizer and this run uses %s", c.Optimizer.Name,
			opt.Name())
	}
	if err := opt.Load(c.Optimizer); err != nil {
		return fmt.Errorf("%w: %w", ErrIncompatible, err)
	}
	for i := range p.Len() {
		if err := p.SetValue(i, c.Params[p.Name(i)]); err != nil {
			return fmt.Errorf("%w: %w", ErrIncompatible, err) // unreachable: sizes were checked
		}
	}
	return nil
}

// validate checks that c can be saved and loaded back as it is.
func (c *Checkpoint) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: can't save: "+format, args...)
	}
	if c == nil {
		return bad("no checkpoint")
	}
	if c.Step < 0 || c.Optimizer.Step < 0 || c.Step > MaxStep || c.Optimizer.Step > MaxStep {
		return bad("step %d (optimizer %d) outside [0, %d]", c.Step, c.Optimizer.Step, MaxStep)
	}
	if c.Dtype != "" && c.Dtype != "float32" && c.Dtype != "float64" {
		return bad("dtype %q; want float32, float64 or empty", c.Dtype)
	}
	for name, v := range c.Params {
		if err := checkName(name); err != nil {
			return bad("parameter %q: %v", name, err)
		}
		if n, ok := numel(c.shape(name)); !ok || n != len(v) {
			return bad("parameter %s has %d values for shape %v", name, len(v), c.shape(name))
		}
	}
	for name, b := range c.Files {
		if err := checkFileName(name); err != nil || len(b) == 0 || len(b) > MaxFileBytes {
			return bad("file %q: want a plain name other than the manifest's and its directories', of 1 to %d bytes",
				name, MaxFileBytes)
		}
	}
	for name := range c.Shapes {
		if _, ok := c.Params[name]; !ok {
			return bad("a shape for %s, which has no values", name)
		}
	}
	return nil
}

// shape is the shape parameter name is saved with.
func (c *Checkpoint) shape(name string) []int {
	if s, ok := c.Shapes[name]; ok {
		return s
	}
	return []int{len(c.Params[name])}
}

// checkName allows names that are plain file names: params/<name>.npy.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return fmt.Errorf("a parameter name must be a plain file name (no slashes, not empty)")
	}
	return nil
}

// checkFileName allows the names of Files: plain file names that are
// none of the checkpoint's own.
func checkFileName(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	switch name {
	case manifestName, paramsDir, optimDir, extraDir:
		return fmt.Errorf("%s is the checkpoint's own", name)
	}
	return nil
}

// numel is the product of shape, and whether it is a valid shape.
func numel(shape []int) (int, bool) {
	n := 1
	for _, d := range shape {
		if d < 0 || d > 0 && n > (1<<48)/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

func names(p Model) []string {
	out := make([]string, p.Len())
	for i := range out {
		out[i] = p.Name(i)
	}
	return out
}
