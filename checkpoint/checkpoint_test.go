package checkpoint

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/optim"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// at is the directory of the checkpoint of step in dir.
func at(dir string, step int) string { return filepath.Join(dir, stepDirName(step)) }

// sample is a checkpoint with every kind of content, its values awkward
// enough that any rounding shows.
func sample(step int) *Checkpoint {
	return &Checkpoint{
		Step:  step,
		Dtype: "float64",
		Params: map[string][]float64{
			"fc1.weight": {math.Pi, -1e-300, 1.0 / 3, math.MaxFloat64, math.Copysign(0, -1), float64(step)},
			"fc1.bias":   {1, 2, 3}, // no shape: saved as a vector
		},
		Shapes: map[string][]int{"fc1.weight": {2, 3}},
		Optimizer: optim.State{Name: "adam", Step: step, Buffers: map[string][]float64{
			"exp_avg/0": {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, "exp_avg/1": {1, 1, 1},
			"exp_avg_sq/0": {1e-9, 2e-9, 3e-9, 4e-9, 5e-9, 6e-9}, "exp_avg_sq/1": {2, 2, 2},
		}},
		Extra: map[string][]float64{"powersgd/error/fc1.weight": {0.5, -0.5}},
		Meta:  map[string]string{"world_size": "2", "model": "mlp"},
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	want := sample(7)
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want.Shapes["fc1.bias"] = []int{3} // Load reports every shape
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v\nsaved  %+v", got, want)
	}
	if !math.Signbit(got.Params["fc1.weight"][4]) {
		t.Error("-0 lost its sign")
	}
	// Saving again replaces the checkpoint: the new one is whole, the
	// old one gone.
	next := sample(8)
	next.Extra = nil
	if err := Save(dir, next); err != nil {
		t.Fatal(err)
	}
	if got, err = Load(dir); err != nil || got.Step != 8 || len(got.Extra) != 0 {
		t.Fatalf("after a second save: step %v, extra %v, err %v", got.Step, got.Extra, err)
	}
	if _, err := os.Stat(filepath.Join(at(dir, 8), extraDir, "0.npy")); !os.IsNotExist(err) {
		t.Errorf("the second save has an extra file: %v", err)
	}
	if got, want := entryNames(t, dir), []string{"latest", "step-000000008"}; !slices.Equal(got, want) {
		t.Errorf("after the second save the directory holds %v, want %v", got, want)
	}
}

// A save that fails part way, here on its third file, leaves the
// previous checkpoint whole and nothing beside it.
func TestFailedSaveKeepsThePreviousCheckpoint(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	if err := Save(dir, sample(1)); err != nil {
		t.Fatal(err)
	}
	writes := 0
	failing := func(path string, shape []int, data []float64) error {
		if writes++; writes == 3 {
			return errors.New("disk full")
		}
		return writeNPY(path, shape, data)
	}
	if err := save(dir, sample(2), failing, Options{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("save with a failing write: %v", err)
	}
	if writes != 3 {
		t.Fatalf("%d writes; the failure was not mid-save", writes)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := sample(1)
	want.Shapes["fc1.bias"] = []int{3}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after a failed save the checkpoint is %+v, want the previous one", got)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("the failed save left %d entries beside the checkpoint directory", len(entries)-1)
	}
	if got, want := entryNames(t, dir), []string{"latest", "step-000000001"}; !slices.Equal(got, want) {
		t.Errorf("after the failed save the directory holds %v, want %v", got, want)
	}
}

// A process killed mid-save leaves its temporary directory; the
// checkpoint still loads, and the next save clears the leftovers.
func TestKilledSaveLeavesTheCheckpointLoadable(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	if err := Save(dir, sample(1)); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".step-000000002.tmp-123456")
	if err := os.MkdirAll(filepath.Join(stale, paramsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, paramsDir, "fc1.weight.npy"), []byte("\x93NUMPY half"),
		0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(dir); err != nil || got.Step != 1 {
		t.Fatalf("Load beside a dead save: step %v, %v", got, err)
	}
	if err := Save(dir, sample(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead save's directory is still there: %v", err)
	}
}

func TestSaveRejectsWhatItCouldNotLoad(t *testing.T) {
	for name, edit := range map[string]func(*Checkpoint){
		"slash in a name":     func(c *Checkpoint) { c.Params["../evil"] = []float64{1} },
		"empty name":          func(c *Checkpoint) { c.Params[""] = []float64{1} },
		"shape without value": func(c *Checkpoint) { c.Shapes["fc2.bias"] = []int{1} },
		"data for shape":      func(c *Checkpoint) { c.Shapes["fc1.bias"] = []int{4} },
		"negative dim":        func(c *Checkpoint) { c.Shapes["fc1.bias"] = []int{-3} },
		"dtype":               func(c *Checkpoint) { c.Dtype = "int8" },
		"negative step":       func(c *Checkpoint) { c.Step = -1 },
	} {
		dir := filepath.Join(t.TempDir(), "ckpt")
		c := sample(1)
		edit(c)
		if err := Save(dir, c); err == nil {
			t.Errorf("%s: Save accepted it", name)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: a rejected save created the directory", name)
		}
	}
}

func TestLoadRejectsDamagedCheckpoints(t *testing.T) {
	manifestEdits := map[string]func(string) string{
		"unknown field": func(s string) string { return strings.Replace(s, `"step"`, `"stepp": 1, "step"`, 1) },
		"other format":  func(s string) string { return strings.Replace(s, formatName, "goddp-checkpoint/9", 1) },
		"escaping file": func(s string) string { return strings.Replace(s, "params/fc1.bias.npy", "../fc1.bias.npy", 1) },
		"wrong shape": func(s string) string {
			return strings.Replace(s, "[\n        3\n      ]", "[\n        4\n      ]",
				1)
		},
		"not json":      func(string) string { return "{" },
		"trailing data": func(s string) string { return s + "{}" },
	}
	for name, edit := range manifestEdits {
		dir := filepath.Join(t.TempDir(), "ckpt")
		if err := Save(dir, sample(1)); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(at(dir, 1), manifestName)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		edited := edit(string(b))
		if edited == string(b) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("%s: Load gave %v; want ErrBadCheckpoint", name, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none")); !errors.Is(err, ErrBadCheckpoint) {
		t.Errorf("a missing directory: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := Save(dir, sample(1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(at(dir, 1), optimDir, "2.npy")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrBadCheckpoint) || !strings.Contains(err.Error(), "2.npy") {
		t.Errorf("a missing buffer file: %v", err)
	}
}
