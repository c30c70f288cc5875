package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// quickRun is how an example is run here: its arguments for a run of
// seconds, and a pattern its output must match.
type quickRun struct {
	args []string
	want string
}

// quickRuns names every example's quick run; an example without one fails
// TestExamplesCopiedOut, so a new example gets a row here.
func quickRuns() map[string]quickRun {
	return map[string]quickRun{
		// a job of one rank: no launcher's variables are set
		"hookmetrics": {[]string{"--steps", "5", "--metrics-addr", "127.0.0.1:0"}, `rank 0 of 1: loss [0-9.]+ after 5 steps`},
		"multiproc":   {[]string{"--steps", "5"}, `rank 0 of 1: loss .* params sha256 [0-9a-f]+`},
		// launches itself: two worker processes over tcp on loopback
		"gomlx": {[]string{"--nproc", "2", "--steps", "5", "--batch", "16"}, `ranks 2, loss .* replicas identical`},
		// two goroutine ranks over pg/local
		"train": {[]string{"--nproc", "2", "--steps", "5"}, `replicas identical: true`},
	}
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T, goTool string) string {
	t.Helper()
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not inside the module")
	}
	return filepath.Dir(gomod)
}

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: no go command to build the examples with")
	}
	return p
}

// offline is the environment of a go command that must not reach the
// network: the module cache serves every module, or the build fails.
func offline() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
}

// TestGoMLXLinksNoGorgonia: the packages a GoMLX program joins and launches
// through (dist, launch), and examples/gomlx itself, depend on no Gorgonia
// package; dist and launch on no engine at all.
func TestGoMLXLinksNoGorgonia(t *testing.T) {
	goTool := goTool(t)
	root := moduleRoot(t, goTool)
	for _, pkg := range []string{"./examples/gomlx", "./dist", "./launch"} {
		cmd := exec.Command(goTool, "list", "-deps", pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "github.com/goddp/ddp/dist") {
			t.Errorf("go list -deps %s lacks github.com/goddp/ddp/dist: it joins its job some other way", pkg)
		}
		var engines []string
		for _, d := range deps {
			gomlx := strings.HasPrefix(d, "github.com/gomlx/")
			if strings.HasPrefix(d, "gorgonia.org/") || (gomlx && pkg != "./examples/gomlx") {
				engines = append(engines, d)
			}
		}
		if len(engines) > 0 {
			t.Errorf("%s depends on %d engine packages: %s", pkg, len(engines), strings.Join(engines, " "))
		}
	}
}

// TestExamplesCopiedOut copies every example out of the module, builds it
// as a module of its own and runs it (see the package's doc). The GoMLX
// binary's build information must name no gorgonia.org module.
func TestExamplesCopiedOut(t *testing.T) {
	goTool := goTool(t)
	root := moduleRoot(t, goTool)
	gomod := copyGoMod(t, root)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	runs := quickRuns()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		t.Run(name, func(t *testing.T) {
			run, ok := runs[name]
			if !ok {
				t.Fatalf("examples/%s has no quick run in quickRuns (tests/examples): add one", name)
			}
			dir := filepath.Join(t.TempDir(), name)
			copyTree(t, filepath.Join(root, "examples", name), dir)
			writeFile(t, filepath.Join(dir, "go.mod"), gomod)
			writeFile(t, filepath.Join(dir, "go.sum"), gosum)
			bin := filepath.Join(t.TempDir(), name)
			build := exec.Command(goTool, "build", "-o", bin, ".")
			build.Dir, build.Env = dir, offline()
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("examples/%s copied out of the module does not build: %v\n%s", name, err, out)
			}
			if name == "gomlx" {
				checkNoGorgonia(t, goTool, bin)
			}
			runQuick(t, bin, run)
		})
	}
}

// copyGoMod is the copy's go.mod: the module's go line and require blocks,
// goddp itself required and replaced by this checkout.
func copyGoMod(t *testing.T, root string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go [0-9.]+$`).Find(b)
	requires := regexp.MustCompile(`(?ms)^require \(\n.*?^\)$|^require [^(\n]+$`).FindAll(b, -1)
	if goLine == nil || len(requires) == 0 {
		t.Fatalf("%s/go.mod: no go line or no require block", root)
	}
	var m bytes.Buffer
	m.WriteString("module example.com/copy\n\n")
	m.Write(goLine)
	m.WriteString("\n\n")
	for _, r := range requires {
		m.Write(r)
		m.WriteString("\n\n")
	}
	m.WriteString("require github.com/goddp/ddp v0.0.0\n\n")
	m.WriteString("replace github.com/goddp/ddp => " + root + "\n")
	return m.Bytes()
}

// copyTree copies the example's files, but not a go.mod or go.sum of its
// own: the copy gets the ones copyGoMod and the module's go.sum make.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if rel == "go.mod" || rel == "go.sum" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkNoGorgonia fails if the binary's build information names a
// gorgonia.org module (go version -m lists every module linked in).
func checkNoGorgonia(t *testing.T, goTool, bin string) {
	t.Helper()
	out, err := exec.Command(goTool, "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "gorgonia.org/") {
			t.Errorf("the GoMLX example links Gorgonia: %s", strings.TrimSpace(line))
		}
	}
}

// runQuick runs the binary with its quick run's arguments, outside any
// job a launcher describes (so it is a job of its own), and matches its
// output.
func runQuick(t *testing.T, bin string, run quickRun) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, run.args...)
	cmd.Dir = t.TempDir()
	cmd.Env = jobless(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(run.args, " "), err, out)
	}
	if !regexp.MustCompile(run.want).Match(out) {
		t.Fatalf("%s %s printed no line matching %q:\n%s", filepath.Base(bin), strings.Join(run.args, " "), run.want, out)
	}
}

// jobless drops the variables through which a launcher describes a job
// (pg/env reads them), so that a test run under one still runs each
// example as a job of one process.
func jobless(environ []string) []string {
	prefixes := []string{"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "GROUP_RANK=",
		"MASTER_ADDR=", "MASTER_PORT=",
		"GODDP_", "OMPI_", "PMIX_", "SLURM_", "TORCHELASTIC_", "KUBERNETES_"}
	var kept []string
	for _, kv := range environ {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			kept = append(kept, kv)
		}
	}
	return kept
}
