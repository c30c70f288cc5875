package reducer

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// The machine's scenarios are scripts in testdata/*.txt, in the manner of
// raft's datadriven tests: a new scenario is a text file, no Go code. A
// script is a list of blocks, each a command line, a line "----", and
// what the command must print, up to a blank line. Lines starting with #
// between blocks are comments. After a deliberate change,
//
//	go test ./reducer -run TestMachineScripts -rewrite
//
// writes what each command printed back into the files; review the diff.
//
// Commands (the machine's events, and two to look at it):
//
//	machine params=N plan=2,3/0,1 [find-unused] [static] [check-finite] [find-origin] [devices]
//	                            a new machine; parameters are named p0, p1, ...; devices: the group
//	                            keeps device buckets
//	begin [sync] [unused=1,2]   Prepare
//	began [host-only]           Prepare's actions are done (host-only: the hook had no device form)
//	ready I [device] [dtype=float64] [len=N]
//	                            MarkReady of a float32 host gradient of one element unless told otherwise
//	finish                      Finalize           waited [used=2,0,1] [origin]     done
//	fail MESSAGE                evFail             replan 0,1/2        join on|off
//	status                      the status snapshot
//
// An event prints its actions one a line, "ok" when there are none, or
// "error: " and the message, with the sentinel it wraps in parentheses.
// Lines over 100 characters are broken at a space and continue indented.

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.txt with what the commands print")

func TestMachineScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runMachineScript(t, file) })
	}
}

// block is one command of a script and what it must print.
type block struct {
	comments []string
	line     int
	cmd      string
	want     string
}

func parseScript(t *testing.T, file string) []block {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var blocks []block
	var comments []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l == "" || strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, i+1, l)
		}
		b := block{comments: comments, line: i + 1, cmd: l}
		comments = nil
		var want []string
		for i += 2; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		b.want = strings.Join(want, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

func runMachineScript(t *testing.T, file string) {
	blocks := parseScript(t, file)
	var m *machine
	var out strings.Builder
	for _, b := range blocks {
		got := runCommand(t, &m, b.cmd)
		if *rewrite {
			for _, c := range b.comments {
				out.WriteString(c + "\n")
			}
			fmt.Fprintf(&out, "%s\n----\n%s\n\n", b.cmd, got)
			continue
		}
		if got != b.want {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, b.line, b.cmd, got, b.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runCommand performs one command on *m and returns what it prints.
func runCommand(t *testing.T, m **machine, cmd string) string {
	f := strings.Fields(cmd)
	name, args := f[0], map[string]string{}
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	if name == "machine" {
		n, _ := strconv.Atoi(args["params"])
		o := Options{FindUnusedParameters: has(args, "find-unused"), StaticGraph: has(args, "static"),
			CheckFinite: has(args, "check-finite"), FindNonFiniteOrigin: has(args, "find-origin")}
		*m = testMachine(n, o, parsePlan(args["plan"]), has(args, "devices"))
		return "ok"
	}
	if *m == nil {
		t.Fatalf("%q before a machine command", cmd)
	}
	if name == "status" {
		return wrap(formatStatus((*m).status()))
	}
	ev := scriptEvent(t, name, f, args)
	as, err := (*m).step(ev, nil)
	return wrap(formatStep(as, err))
}

// wrap breaks lines over 100 characters at spaces, continuing with two
// spaces of indent, so that scripts keep to the line limit.
func wrap(s string) string {
	const width = 100
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for len(line) > width {
			cut := strings.LastIndex(line[:width], " ")
			if cut <= 2 {
				break
			}
			out = append(out, line[:cut])
			line = "  " + line[cut+1:]
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func has(args map[string]string, k string) bool { _, ok := args[k]; return ok }

func scriptEvent(t *testing.T, name string, f []string, args map[string]string) event {
	switch name {
	case "begin":
		return evBegin{sync: has(args, "sync"), unused: ints(args["unused"])}
	case "began":
		return evBegan{hostOnly: has(args, "host-only")}
	case "ready":
		i, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("ready %q: %v", f[1], err)
		}
		return evReady{param: i, grad: scriptGrad(args)}
	case "finish":
		return evFinish{}
	case "waited":
		var used []int32
		if u, ok := args["used"]; ok {
			for _, n := range ints(u) {
				used = append(used, int32(n))
			}
		}
		return evWaited{globalUsed: used, origin: has(args, "origin")}
	case "done":
		return evDone{}
	case "fail":
		return evFail{err: errors.New(strings.Join(f[1:], " "))}
	case "replan":
		return evReplanned{plan: parsePlan(f[1])}
	case "join":
		return evJoin{othersJoined: f[1] == "on"}
	}
	t.Fatalf("unknown command %q", name)
	return nil
}

func scriptGrad(args map[string]string) pg.Tensor {
	n := 1
	if l, ok := args["len"]; ok {
		n, _ = strconv.Atoi(l)
	}
	d := pg.Float32
	if args["dtype"] == "float64" {
		d = pg.Float64
	}
	if has(args, "device") {
		return pg.Tensor{Dtype: d, Device: &pg.DeviceMemory{Bytes: n * d.Size()}}
	}
	return pg.NewTensor(d, n)
}

// parsePlan reads buckets separated by / and their parameters by commas.
func parsePlan(s string) [][]int {
	var plan [][]int
	for _, b := range strings.Split(s, "/") {
		plan = append(plan, ints(b))
	}
	return plan
}

func ints(s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for _, x := range strings.Split(s, ",") {
		n, _ := strconv.Atoi(x)
		out = append(out, n)
	}
	return out
}

func formatStep(as []action, err error) string {
	if err != nil {
		for _, s := range []error{ErrUnfinishedReduction, ErrMarkedTwice, ErrBadGradient, ErrGraphChanged} {
			if errors.Is(err, s) {
				return fmt.Sprintf("error (%s): %v", sentinelName(s), err)
			}
		}
		return "error: " + err.Error()
	}
	if len(as) == 0 {
		return "ok"
	}
	lines := make([]string, len(as))
	for i, a := range as {
		lines[i] = a.String()
	}
	return strings.Join(lines, "\n")
}

func sentinelName(err error) string {
	switch err {
	case ErrUnfinishedReduction:
		return "ErrUnfinishedReduction"
	case ErrMarkedTwice:
		return "ErrMarkedTwice"
	case ErrBadGradient:
		return "ErrBadGradient"
	}
	return "ErrGraphChanged"
}

func formatStatus(s status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%v", s.phase)
	if s.phase == phaseBusy {
		fmt.Fprintf(&b, "(%s)", s.busyIn)
	}
	fmt.Fprintf(&b, " iterations=%d ready=%d/%d launched=%d/%d stage=%v", s.iterations, s.ready, s.params,
		s.launched, s.buckets, s.stage)
	if s.readyOrder != nil {
		fmt.Fprintf(&b, " order=%v", s.readyOrder)
	}
	if s.window {
		b.WriteString(" window")
	}
	if s.othersJoined {
		b.WriteString(" others-joined")
	}
	if s.devices {
		fmt.Fprintf(&b, " devices twins=%v", [...]string{"none", "plain", "final"}[s.twins])
	}
	if s.globalUnused != nil {
		fmt.Fprintf(&b, " global-unused=%v", indices(s.globalUnused))
	}
	if s.staticUnused != nil {
		fmt.Fprintf(&b, " static-unused=%v", indices(s.staticUnused))
	}
	if s.err != nil {
		fmt.Fprintf(&b, "\nerr: %s", s.err.Error())
	}
	return b.String()
}

func indices(set []bool) []int {
	out := []int{}
	for i, in := range set {
		if in {
			out = append(out, i)
		}
	}
	return out
}

// String is an action as the scripts print it: its kind, then its fields.
func (a action) String() string {
	flag := func(on bool, name string) string {
		if on {
			return " " + name
		}
		return ""
	}
	switch a.kind {
	case actRebuild:
		return fmt.Sprintf("rebuild order=%v", a.order) + flag(a.carry, "carry")
	case actInstallDevice:
		return "install-device" + map[bool]string{true: " final", false: " plain"}[a.final]
	case actStore:
		return fmt.Sprintf("store %d", a.param) + flag(a.sum, "sum")
	case actZero:
		return fmt.Sprintf("zero %d", a.param)
	case actUpload:
		return fmt.Sprintf("upload %d", a.param)
	case actLaunch:
		return fmt.Sprintf("launch %d", a.bucket) + flag(a.screen, "screen")
	case actReduceUsed:
		return fmt.Sprintf("reduce-used unused=%v", a.unused)
	case actWait:
		return "wait" + flag(a.reduceUsed, "reduce-used")
	case actAgreeOrigin:
		return "agree-origin" + flag(a.ownAllreduce, "own-allreduce")
	case actWriteBack:
		if a.globalUsed == nil {
			return "write-back"
		}
		return fmt.Sprintf("write-back used=%v", a.globalUsed)
	case actReportOrigin:
		return fmt.Sprintf("report-origin iteration=%d", a.iteration)
	case actCheckFinite:
		s := fmt.Sprintf("check-finite iteration=%d", a.iteration)
		if a.usedByNone != nil {
			s += fmt.Sprintf(" used-by-none=%v", indices(a.usedByNone))
		}
		return s
	}
	return fmt.Sprintf("action(%d)", a.kind)
}
