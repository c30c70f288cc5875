package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/launch"
)

// Real-process tests of Note [outputs own only their files] and Note
// [checkpoint directories are owned]: docs/safety.md's rows 1-7 and 16.

// plant writes files (path relative to root → contents), making their
// directories.
func plant(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for f, body := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// intact fails the test for each file of files that is not as planted.
func intact(t *testing.T, root string, files map[string]string, when string) {
	t.Helper()
	for f, body := range files {
		if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != body {
			t.Errorf("%s: the user's %s is %q (%v), want %q", when, f, b, err, body)
		}
	}
}

// refusedUpFront fails the test unless r is exit 2 before any worker
// started, its last line containing every one of want.
func refusedUpFront(t *testing.T, r result, what string, want ...string) {
	t.Helper()
	last := lastLine(r.stderr)
	if r.code != 2 || strings.Contains(r.stderr, "[rank ") {
		t.Errorf("%s: exit %d, stderr\n%s\nwant exit 2 before any worker started", what, r.code, r.stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Errorf("%s: the last line %q does not say %q", what, last, w)
		}
	}
}

// Row 1: --save into a directory that holds other files (a subdirectory,
// the working directory as "$PWD") writes its .npy files and its list and
// touches nothing else, nor replaces the directory; a file of a name it
// would write that no save wrote is refused up front, naming it.
func TestSaveKeepsTheDirectorysOtherFiles(t *testing.T) {
	root := t.TempDir()
	s := filepath.Join(root, "s")
	user := map[string]string{filepath.Join("other", "w"): "x", "notes.txt": "mine",
		"fc9.weight.npy": "not a parameter of this model"}
	plant(t, s, user)
	before, _ := os.Stat(s)
	if r := ddpTrain(t, args("--steps", "2", "--save", s)...); r.code != 0 {
		t.Fatalf("--save s: exit %d\n%s", r.code, r.stderr)
	}
	intact(t, s, user, "after --save s")
	if after, err := os.Stat(s); err != nil || !os.SameFile(before, after) {
		t.Errorf("--save replaced the directory itself (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(s, "fc1.weight.npy")); err != nil {
		t.Errorf("--save wrote no fc1.weight.npy: %v", err)
	}
	// Again, from inside it: the save's own files are replaced, nothing else.
	if r := ddpTrainIn(t, s, args("--steps", "3", "--save", s)...); r.code != 0 {
		t.Fatalf(`(cd s && --save "$PWD"): exit %d%s`, r.code, r.stderr)
	}
	intact(t, s, user, `after (cd s && --save "$PWD")`)

	u := filepath.Join(root, "u")
	theirs := map[string]string{"fc1.bias.npy": "someone else's"}
	plant(t, u, theirs)
	refusedUpFront(t, ddpTrain(t, args("--steps", "2", "--save", u)...), "a foreign fc1.bias.npy",
		filepath.Join(u, "fc1.bias.npy"))
	intact(t, u, theirs, "after the refused --save")
}

// Row 2: --checkpoint in a directory of the user's (their home, say)
// keeps their files through every save, and CHECKPOINT/flight (the
// default --flight-dir) survives the next run, even one that starts over
// with --overwrite-checkpoints; a manifest.json that is not a
// checkpoint's is refused up front, naming it.
func TestCheckpointKeepsTheDirectorysOtherFiles(t *testing.T) {
	root := t.TempDir()
	h := filepath.Join(root, "home")
	user := map[string]string{".bashrc": "precious", filepath.Join("work", "thesis.tex"): "years", "params.npy": "mine"}
	plant(t, h, user)
	if r := ddpTrain(t, args("--steps", "3", "--checkpoint", h, "--checkpoint-every", "1")...); r.code != 0 {
		t.Fatalf("--checkpoint home: exit %d\n%s", r.code, r.stderr)
	}
	intact(t, h, user, "after three checkpoints")
	dump := map[string]string{filepath.Join("flight", "nccl_trace_rank_0"): "a dump the user kept"}
	plant(t, h, dump)
	if r := ddpTrain(t,
		args("--steps", "2", "--checkpoint", h, "--checkpoint-every", "1", "--checkpoint-keep", "2",
			"--overwrite-checkpoints")...); r.code != 0 {
		t.Fatalf("--overwrite-checkpoints: exit %d\n%s", r.code, r.stderr)
	}
	intact(t, h, user, "after --overwrite-checkpoints")
	intact(t, h, dump, "after --overwrite-checkpoints")
	if got := checkpoint.Steps(h); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("the run that started over left steps %v, want [1 2]", got)
	}

	w := filepath.Join(root, "webapp")
	theirs := map[string]string{"manifest.json": `{"name": "my web app", "start_url": "/"}`}
	plant(t, w, theirs)
	refusedUpFront(t, ddpTrain(t, args("--steps", "2", "--checkpoint", w, "--checkpoint-every", "1")...),
		"a foreign manifest.json", filepath.Join(w, "manifest.json"))
	intact(t, w, theirs, "after the refused --checkpoint")
}

// A checkpoint in the layout earlier versions wrote (the checkpoint in
// the directory itself) resumes, and the first new save removes its
// files, and only its files.
func TestResumeAcrossTheLayoutChange(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if r := ddpTrain(t, args("--steps", "2", "--checkpoint", ck, "--checkpoint-every", "2")...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	// Make it the old layout: step-000000002/* moved up, no latest.
	step := filepath.Join(ck, "step-000000002")
	for _, name := range []string{"manifest.json", "params", "optimizer", "extra", "model-card.json"} {
		if err := os.Rename(filepath.Join(step, name), filepath.Join(ck, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(step); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ck, "latest")); err != nil {
		t.Fatal(err)
	}
	user := map[string]string{filepath.Join("params", "mine.npy"): "the user's"}
	plant(t, ck, user)
	r := ddpTrain(t, args("--steps", "4", "--checkpoint", ck, "--checkpoint-every", "2", "--resume")...)
	if r.code != 0 || !strings.Contains(r.stderr, `"msg":"resuming","rank":0,"step":2`) {
		t.Fatalf("--resume from the older layout: exit %d\n%s", r.code, r.stderr)
	}
	entries, _ := os.ReadDir(ck)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{".ddp-train.lock", "latest", "params", "step-000000004"}; !slices.Equal(names, want) {
		t.Errorf("after the first new save the directory holds %v, want %v", names, want)
	}
	intact(t, ck, user, "after the older checkpoint's removal")
}

// Row 3: outputs that would write over each other are refused up front,
// comparing real paths.
func TestOverlappingOutputsAreRefused(t *testing.T) {
	root := t.TempDir()
	x := filepath.Join(root, "x")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink("x", link); err != nil {
		t.Fatal(err)
	}
	for name, flags := range map[string][]string{
		"--save = --checkpoint":       {"--save", x, "--checkpoint", x},
		"--save inside --checkpoint":  {"--save", filepath.Join(x, "model"), "--checkpoint", x},
		"--checkpoint inside --save":  {"--save", x, "--checkpoint", filepath.Join(x, "ck")},
		"the same through a link":     {"--save", link, "--checkpoint", x},
		"--summary as latest":         {"--summary", filepath.Join(link, "latest"), "--checkpoint", x},
		"--flight-dir in a step":      {"--flight-dir", filepath.Join(x, "step-000000002"), "--checkpoint", x},
		"--summary as a saved param":  {"--summary", filepath.Join(x, "fc1.weight.npy"), "--save", x},
		"--timeline as the save list": {"--timeline", filepath.Join(x, ".ddp-train-save"), "--save", link},
	} {
		run := []string{"--steps", "2"}
		if slices.Contains(flags, "--checkpoint") {
			run = append(run, "--checkpoint-every", "1")
		}
		refusedUpFront(t, ddpTrain(t, args(append(run, flags...)...)...), name, flags[1])
	}
	if entries, _ := os.ReadDir(x); len(entries) != 0 {
		t.Errorf("the refused runs wrote %v", entries)
	}
	// Apart, they work: the summary and the flight dumps may share the
	// checkpoint directory where its files are not.
	r := ddpTrain(t,
		args("--steps", "2", "--checkpoint", x, "--checkpoint-every", "1", "--summary", filepath.Join(x, "summary.json"),
			"--save", filepath.Join(root, "model"))...)
	if r.code != 0 {
		t.Errorf("outputs that do not overlap: exit %d\n%s", r.code, r.stderr)
	}
}

// mountTmpfs mounts a tmpfs at dir (with opts), unmounted at cleanup; it
// skips the test where mounting is not allowed.
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var flags uintptr
	if opts == "ro" {
		flags = syscall.MS_RDONLY
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, "size=64m"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): this test needs root", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// Row 4: --checkpoint and --save on a mount point (a Kubernetes volume),
// and --checkpoint-keep 3 in a directory whose parent is read-only, work;
// a read-only file system is refused before training.
func TestOutputsOnAMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	root := t.TempDir()
	m := filepath.Join(root, "ckpt")
	mountTmpfs(t, m, "")
	if r := ddpTrain(t, args("--steps", "2", "--checkpoint", m, "--checkpoint-every", "1")...); r.code != 0 {
		t.Errorf("--checkpoint on a mount point: exit %d\n%s", r.code, r.stderr)
	}
	if c, err := checkpoint.Load(m); err != nil || c.Step != 2 {
		t.Errorf("the checkpoint on the mount point: %v, %v", c, err)
	}
	s := filepath.Join(root, "model")
	mountTmpfs(t, s, "")
	if r := ddpTrain(t, args("--steps", "2", "--save", s)...); r.code != 0 {
		t.Errorf("--save on a mount point: exit %d\n%s", r.code, r.stderr)
	}

	// A read-only parent: /ro is a read-only tmpfs, /ro/ck a writable one.
	ro := filepath.Join(root, "ro")
	mountTmpfs(t, ro, "")
	ck := filepath.Join(ro, "ck")
	mountTmpfs(t, ck, "")
	if err := syscall.Mount("", ro, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount read-only: %v", err)
	}
	if r := ddpTrain(t,
		args("--steps", "3", "--checkpoint", ck, "--checkpoint-every", "1", "--checkpoint-keep", "3")...); r.code != 0 {
		t.Errorf("--checkpoint-keep 3 under a read-only parent: exit %d\n%s", r.code, r.stderr)
	}
	if got := checkpoint.Steps(ck); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("under a read-only parent: steps %v, want [1 2 3]", got)
	}
	// A read-only file system: refused up front.
	rofs := filepath.Join(root, "rofs")
	mountTmpfs(t, rofs, "ro")
	refusedUpFront(t, ddpTrain(t, args("--steps", "2", "--save", rofs)...), "--save on a read-only file system",
		"read-only file system")
	refusedUpFront(t, ddpTrain(t, args("--steps", "2", "--checkpoint", rofs, "--checkpoint-every", "1")...),
		"--checkpoint on a read-only file system", "read-only file system")
}

// Row 5: links planted by another user of a shared directory are never
// followed: the old lock beside the directory is not opened at all, a
// link in place of the lock file or of CHECKPOINT/flight is refused up
// front, naming it, and what they point at is untouched.
func TestPlantedLinksAreNotFollowed(t *testing.T) {
	shared := t.TempDir()
	victim := filepath.Join(shared, "victim")
	elsewhere := filepath.Join(shared, "elsewhere")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(shared, ".NAME.lock")); err != nil {
		t.Fatal(err)
	}
	if r := ddpTrain(t,
		args("--steps", "2", "--checkpoint", filepath.Join(shared, "NAME"), "--checkpoint-every", "1")...); r.code != 0 {
		t.Errorf("--checkpoint beside a planted .NAME.lock: exit %d\n%s", r.code, r.stderr)
	}
	intact(t, shared, map[string]string{"victim": "precious"}, "with .NAME.lock -> victim")

	ck := filepath.Join(shared, "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(ck, ".ddp-train.lock")
	if err := os.Symlink(victim, lock); err != nil {
		t.Fatal(err)
	}
	refusedUpFront(t, ddpTrain(t, args("--steps", "2", "--checkpoint", ck, "--checkpoint-every", "1")...),
		"a planted lock link", lock)
	intact(t, shared, map[string]string{"victim": "precious"}, "with CHECKPOINT/.ddp-train.lock -> victim")
	os.Remove(lock)

	flightLink := filepath.Join(ck, "flight")
	if err := os.Symlink(elsewhere, flightLink); err != nil {
		t.Fatal(err)
	}
	refusedUpFront(t, ddpTrain(t, args("--steps", "2", "--checkpoint", ck, "--checkpoint-every", "1")...),
		"a planted flight link", flightLink)
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("written through CHECKPOINT/flight -> elsewhere: %v", entries)
	}
}

// Row 6: a second job on a checkpoint directory through another path to
// it (a symbolic link) is refused at once; the first runs on.
func TestSecondJobThroughALinkIsRefused(t *testing.T) {
	root := t.TempDir()
	ck, ck2 := filepath.Join(root, "ck"), filepath.Join(root, "ck2")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ck", ck2); err != nil {
		t.Fatal(err)
	}
	first := startTrain(t,
		args("--steps", "1000000", "--checkpoint", ck, "--checkpoint-every", "100000", "--log-every", "1")...)
	first.waitStep(t, 3) // killed at cleanup
	r := ddpTrain(t, args("--steps", "5", "--checkpoint", ck2, "--checkpoint-every", "1", "--resume")...)
	refusedUpFront(t, r, "a second job through ck2 -> ck", "in use by another run", "pid ")
	select {
	case <-first.done:
		t.Fatalf("the first job ended:\n%s", first.stderr.String())
	default:
	}
}

// Row 7: --resume where there is no checkpoint yet (an empty or missing
// directory: the first start of a job that always passes --resume)
// trains from step 0, saying so once, as a run without --resume would;
// under an external launcher (docs/launchers.md's JobSet example) too. A damaged
// checkpoint is still exit 2.
func TestResumeWithoutACheckpointStartsAtStepZero(t *testing.T) {
	root := t.TempDir()
	fresh := ddpTrain(t, args("--steps", "3")...)
	if fresh.code != 0 {
		t.Fatalf("exit %d\n%s", fresh.code, fresh.stderr)
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{empty, filepath.Join(root, "missing")} {
		r := ddpTrain(t, args("--steps", "3", "--checkpoint", dir, "--checkpoint-every", "3", "--resume")...)
		if r.code != 0 {
			t.Fatalf("--resume in %s: exit %d\n%s", dir, r.code, r.stderr)
		}
		if n := strings.Count(r.stderr, "no checkpoint in the directory yet; starting from step 0"); n != 1 {
			t.Errorf("--resume in %s: said %d times that it starts from step 0\n%s", dir, n, r.stderr)
		}
		if got, want := digests(r.stderr)["0"], digests(fresh.stderr)["0"]; got != want || got == "" {
			t.Errorf("--resume in %s ended with %s, a fresh run with %s", dir, got, want)
		}
		if c, err := checkpoint.Load(dir); err != nil || c.Step != 3 {
			t.Errorf("--resume in %s: checkpoint %v, %v", dir, c, err)
		}
	}

	// Under an external launcher: two ranks, each its own process.
	job := filepath.Join(root, "job")
	store, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, 2)
	outs := make([]*bytes.Buffer, 2)
	for rank := range cmds {
		cmds[rank] = exec.Command(self, args("--steps", "3", "--checkpoint", job, "--checkpoint-every", "3", "--resume")...)
		cmds[rank].Env = cleanEnv("GODDP_SECRET="+secret, "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", store),
			"WORLD_SIZE=2", fmt.Sprintf("JOB_COMPLETION_INDEX=%d", rank))
		outs[rank] = &bytes.Buffer{}
		cmds[rank].Stderr = outs[rank]
		if err := cmds[rank].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for rank, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d of the JobSet-like job: %v\n%s", rank, err, outs[rank])
		}
	}
	if c, err := checkpoint.Load(job); err != nil || c.Step != 3 {
		t.Errorf("the JobSet-like job's checkpoint: %v, %v", c, err)
	}

	flipMiddle(t, filepath.Join(empty, "step-000000003", "params", "fc1.weight.npy"))
	r := ddpTrain(t, args("--steps", "6", "--checkpoint", empty, "--resume")...)
	if r.code != 2 || !strings.Contains(lastLine(r.stderr), "damaged") {
		t.Errorf("--resume from a damaged checkpoint: exit %d, last line %q; want exit 2", r.code, lastLine(r.stderr))
	}
}

// childPids are the pids of pid's child processes (each listed by the
// thread that started it).
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(tasks) == 0 {
		t.Skipf("cannot list the workers (%v)", err)
	}
	var out []int
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

var dumpedRE = regexp.MustCompile(`"msg":"flight recorder dumped","why":"SIGUSR1","path":"([^"]+)"`)

// reportDirs are the launcher's report directories in tmp.
func reportDirs(tmp string) []string {
	m, _ := filepath.Glob(filepath.Join(tmp, "ddp-train-report-*"))
	return m
}

// Row 16: under ddp-train's own launcher, a SIGUSR1 dump is written
// where its log line says and is still there when the run has ended
// well; a run stopped by SIGINT leaves no report directory behind.
func TestSignalDumpsSurviveAndReportsDoNotPileUp(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the launcher's report directory, and SIGUSR1's default
	r := startTrain(t, args("--steps", "400", "--log-every", "1")...)
	r.waitStep(t, 3)
	workers := childPids(t, r.cmd.Process.Pid)
	if len(workers) != 2 {
		t.Fatalf("workers %v, want 2", workers)
	}
	for _, pid := range workers {
		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	<-r.done
	if r.err != nil {
		t.Fatalf("the run: %v\n%s", r.err, r.stderr.String())
	}
	paths := dumpedRE.FindAllStringSubmatch(r.stderr.String(), -1)
	if len(paths) != 2 {
		t.Fatalf("%d SIGUSR1 dumps logged, want 2 (did the run end first?)\n%s", len(paths), r.stderr.String())
	}
	for _, m := range paths {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("the dump the log names is gone after the run: %v", err)
		}
	}
	if left := reportDirs(tmp); len(left) != 0 {
		t.Errorf("a run that ended well left %v", left)
	}

	stopped := startTrain(t, args("--steps", "1000000", "--log-every", "1")...)
	stopped.waitStep(t, 3)
	if err := stopped.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not stop within 30 s of SIGINT")
	}
	if code := stopped.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("stopped by SIGINT: exit %d, want 130\n%s", code, stopped.stderr.String())
	}
	if left := reportDirs(tmp); len(left) != 0 {
		t.Errorf("a run stopped by SIGINT left %v", left)
	}
}
