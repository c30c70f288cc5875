package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/netbed"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/npy"
)

// The TestNetbed tests launch ddp-train across the hosts of a test bed
// (internal/netbed: network namespaces on one machine, each with
// its own address, hostname and a hosts file naming the others) with
// the launchers users run across machines: torchrun with the c10d
// rendezvous, mpirun through its rsh agent, Kubernetes' and Slurm's
// variables, and ddp-train's own --nnodes. Each layout runs twice and must end bitwise the same both
// times, and close to the one-host run of the same world size
// (netbedTolerance). docs/multi-host.md has the commands and figures.

// netbedTolerance bounds how far a layout's float32 parameters may lie
// from the one-host run's: max |a-b| over a parameter, relative to its
// largest |a|. Summation orders differ between layouts (which ranks
// share memory, which reduce over TCP), so their bits may differ; a
// wrong result (a rank's gradients missing, counted twice or from the
// wrong samples) moves the parameters by far more (docs/multi-host.md).
const netbedTolerance = 1e-5

// netbedEnabled is the gate of the tests on a network-namespace bed.
func netbedEnabled() bool { return os.Getenv("GODDP_TEST_NETBED") == "1" }

// netbedOrSkip skips unless GODDP_TEST_NETBED=1 and this machine can
// build a bed (root, iproute2, util-linux).
func netbedOrSkip(t *testing.T) {
	t.Helper()
	netbed.SkipUnless(t, netbedEnabled())
}

// newNetbed builds a bed of n hosts, removed when the test ends.
func newNetbed(t *testing.T, n int) *netbed.Bed {
	t.Helper()
	return netbed.ForTest(t, netbedEnabled(), netbed.Options{Hosts: n})
}

// netbedFlags are the training flags of every launch, short so that a
// launch takes seconds, with extra (e.g. a larger model) added.
func netbedFlags(save string, extra []string) []string {
	return append(args("--steps", "30", "--log-every", "10", "--save", save), extra...)
}

// largeModel makes the job's one gradient bucket (301072 bytes) larger
// than pg/tcp's DefaultRingThreshold (256 KiB): AllReduce takes the ring,
// and between hosts the hierarchical ring over the hosts' leaders,
// instead of recursive doubling.
var largeModel = []string{"--hidden", "256,256"}

// netbedSecret is a fresh job secret.
func netbedSecret(t *testing.T) string {
	t.Helper()
	s, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hostCmd is one process a launch starts on a host of the bed.
type hostCmd struct {
	host int
	argv []string
	env  []string
}

// runOnHosts starts every command at once, each on its host, waits for
// all (at most 2 minutes) and returns their output together. Any
// command's failure fails the test with everything they printed.
func runOnHosts(t *testing.T, b *netbed.Bed, cmds []hostCmd) string {
	t.Helper()
	return runOnHostsWithin(t, b, cmds, 2*time.Minute)
}

// runOnHostsWithin is runOnHosts with its own limit.
func runOnHostsWithin(t *testing.T, b *netbed.Bed, cmds []hostCmd, limit time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	outs := make([]bytes.Buffer, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cmds {
		cmd := b.Command(ctx, c.host, c.argv[0], c.argv[1:]...)
		cmd.Env = c.env
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			cancel() // the ones started stop; wait for them before failing
			wg.Wait()
			t.Fatalf("starting %s on node%d: %v", c.argv[0], c.host, err)
		}
		wg.Go(func() {
			errs[i] = cmd.Wait()
			if errs[i] != nil {
				cancel() // the others would only wait for it
			}
		})
	}
	wg.Wait()
	var all strings.Builder
	for i := range cmds {
		fmt.Fprintf(&all, "--- node%d: %s\n%s", cmds[i].host, strings.Join(cmds[i].argv, " "), outs[i].String())
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("on node%d, %s: %v after %v\n%s", cmds[i].host, filepath.Base(cmds[i].argv[0]), err,
				time.Since(start).Round(time.Millisecond), all.String())
		}
	}
	t.Logf("launch took %v", time.Since(start).Round(time.Millisecond))
	return all.String()
}

// oneHost trains the job on one host: ddp-train --nproc world, with
// shared memory on or off. It returns the --save directory.
func oneHost(t *testing.T, world int, extra []string, shm bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("one-host-shm-%v", shm))
	flags := append(netbedFlags(dir, extra), "--nproc", strconv.Itoa(world), "--shm="+strconv.FormatBool(shm))
	if r := runWithEnv(t, cleanEnv(), flags...); r.code != 0 {
		t.Fatalf("one-host run (--nproc %d --shm=%v): exit %d\n%s", world, shm, r.code, r.stderr)
	}
	return dir
}

// transportsRE matches the tcp backend's "link transports" line.
var transportsRE = regexp.MustCompile(
	`"msg":"link transports","rank":(\d+),.*"hosts":(\d+)(?:,"leaders":\[([0-9,]*)\])?`)

// checkTransports wants every one of world ranks to log that the job
// spans hosts hosts whose leaders (lowest rank on each) are leaders, ""
// where no host holds several ranks (the line has no leaders then):
// ranks in separate network namespaces of one machine share memory only
// within their namespace.
func checkTransports(t *testing.T, log string, world, hosts int, leaders string) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range transportsRE.FindAllStringSubmatch(log, -1) {
		seen[m[1]] = true
		if m[2] != strconv.Itoa(hosts) || m[3] != leaders {
			t.Errorf("rank %s sees %s hosts with leaders [%s]; want %d hosts with leaders [%s]", m[1], m[2], m[3], hosts,
				leaders)
		}
	}
	if len(seen) != world {
		t.Errorf("%d ranks logged their link transports, want %d", len(seen), world)
	}
}

// checkDigests wants world ranks to report one final parameter digest.
func checkDigests(t *testing.T, log string, world int) {
	t.Helper()
	d := digests(log)
	if len(d) != world {
		t.Fatalf("%d ranks reported final parameters, want %d:\n%s", len(d), world, log)
	}
	for r, v := range d {
		if v != d["0"] {
			t.Fatalf("rank %s ended with parameters %s, rank 0 with %s:\n%s", r, v, d["0"], log)
		}
	}
}

// saveDiff says how far two saved parameter sets lie apart: how many
// values differ in their bits, and the largest |a-b| relative to the
// parameter's largest |a|.
type saveDiff struct {
	values, differ int
	maxAbs, maxRel float64
}

func (d saveDiff) String() string {
	if d.differ == 0 {
		return fmt.Sprintf("bitwise equal (%d values)", d.values)
	}
	return fmt.Sprintf("%d of %d values differ, max |Δ| %.3g (%.3g of the parameter's largest value)", d.differ, d.values,
		d.maxAbs, d.maxRel)
}

// diffSaves compares the .npy files of two --save directories.
func diffSaves(t *testing.T, a, b string) saveDiff {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(a, "*.npy"))
	if len(names) == 0 {
		t.Fatalf("no parameters in %s", a)
	}
	var d saveDiff
	for _, n := range names {
		x, y := readParam(t, n), readParam(t, filepath.Join(b, filepath.Base(n)))
		if len(x) != len(y) {
			t.Fatalf("%s: %d values in %s, %d in %s", filepath.Base(n), len(x), a, len(y), b)
		}
		var scale, maxAbs float64
		for i := range x {
			scale = max(scale, math.Abs(x[i]))
			maxAbs = max(maxAbs, math.Abs(x[i]-y[i]))
			if math.Float64bits(x[i]) != math.Float64bits(y[i]) {
				d.differ++
			}
		}
		d.values += len(x)
		d.maxAbs = max(d.maxAbs, maxAbs)
		if scale > 0 {
			d.maxRel = max(d.maxRel, maxAbs/scale)
		}
	}
	return d
}

func readParam(t *testing.T, path string) []float64 {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// layout is one way to launch a job across the bed.
type layout struct {
	world int      // ranks in all
	extra []string // training flags beyond netbedFlags
	// launch starts the job's run-th launch (0 or 1) with the training
	// flags train, waits for it and returns its log.
	launch func(run int, train []string) string
	// bitwiseNoShm: the layout must end bitwise equal to the one-host
	// run with --shm=false, the same additions in the same order
	// (docs/multi-host.md says which layouts do).
	bitwiseNoShm bool
}

// launchTwice runs a layout twice and wants both runs to end bitwise
// equal, and both within netbedTolerance of the one-host runs of the
// same world size, with shared memory on and off. It returns the first
// run's log.
func launchTwice(t *testing.T, l layout) string {
	t.Helper()
	var dirs [2]string
	var log string
	for run := range 2 {
		dirs[run] = filepath.Join(t.TempDir(), "run"+strconv.Itoa(run))
		out := l.launch(run, netbedFlags(dirs[run], l.extra))
		checkDigests(t, out, l.world)
		if run == 0 {
			log = out
		}
	}
	if d := diffSaves(t, dirs[0], dirs[1]); d.differ != 0 {
		t.Fatalf("the layout run twice: %v; want bitwise equal", d)
	}
	for _, shm := range []bool{true, false} {
		d := diffSaves(t, oneHost(t, l.world, l.extra, shm), dirs[0])
		t.Logf("against one host (--nproc %d --shm=%v): %v", l.world, shm, d)
		if d.maxRel > netbedTolerance {
			t.Errorf("against one host (--nproc %d --shm=%v): %v; want within %g", l.world, shm, d, netbedTolerance)
		}
		if !shm && l.bitwiseNoShm && d.differ != 0 {
			t.Errorf("against one host (--nproc %d --shm=false): %v; want bitwise equal", l.world, d)
		}
	}
	return log
}

// TestNetbedTorchrun: one torchrun agent per host (--nnodes 2
// --nproc_per_node 2), as on two machines, with the c10d rendezvous
// hosted on node0 and with the static one (the default) at node0's
// address. Under c10d torchrun 1.13 hands the workers MASTER_ADDR=node0
// (rank 0's hostname), which the other host resolves through the bed's
// hosts file; under static, the address given, and its agent's store.
func TestNetbedTorchrun(t *testing.T) {
	netbedOrSkip(t)
	py := torchrunPython(t)
	b := newNetbed(t, 2)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Hosts()[0].Addr
	for i, tc := range []struct {
		name string
		rdzv func(port string) []string
		want string // a line node0's workers must log
	}{
		{"c10d", func(port string) []string {
			return []string{"--rdzv_backend", "c10d", "--rdzv_endpoint", addr + ":" + port, "--rdzv_id", "goddp-netbed"}
		}, `"msg":"store: server listening"`}, // rank 0 hosts goddp's store
		{"static", func(port string) []string {
			return []string{"--master_addr", addr, "--master_port", port}
		}, `rendezvous through torchrun's agent store`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := launchTwice(t, layout{world: 4, bitwiseNoShm: true, launch: func(run int, train []string) string {
				env := cleanEnv("GODDP_SECRET=" + netbedSecret(t))
				var cmds []hostCmd
				for h := range 2 {
					argv := []string{py, "-m", "torch.distributed.run", "--log_dir", t.TempDir(),
						"--redirects", "0:1,1:1", "--tee", "0:1,1:1", // Debian's 1.13 crashes without (torchrun_test.go)
						"--monitor_interval", "0.2", "--nnodes", "2", "--nproc_per_node", "2", "--node_rank", strconv.Itoa(h)}
					argv = append(argv, tc.rdzv(strconv.Itoa(29400+10*i+run))...)
					argv = append(append(argv, "--no_python", self), train...)
					cmds = append(cmds, hostCmd{host: h, argv: argv, env: env})
				}
				return runOnHosts(t, b, cmds)
			}})
			checkTransports(t, log, 4, 2, "0,2")
			if node0 := log[:strings.Index(log, "--- node1")]; !strings.Contains(node0, tc.want) {
				t.Errorf("no %s in node0's log (rank 0 is there):\n%s", tc.want, log)
			}
		})
	}
}

// TestNetbedKubernetes: four pods of one rank each, as a PyTorchJob
// without torchrun starts them: RANK, WORLD_SIZE, MASTER_ADDR (the
// master pod's name) and MASTER_PORT, no LOCAL_ variables.
func TestNetbedKubernetes(t *testing.T) {
	netbedOrSkip(t)
	b := newNetbed(t, 4)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := launchTwice(t, layout{world: 4, bitwiseNoShm: true, launch: func(run int, train []string) string {
		secret := netbedSecret(t)
		var cmds []hostCmd
		for r := range 4 {
			env := cleanEnv("GODDP_SECRET="+secret, "RANK="+strconv.Itoa(r), "WORLD_SIZE=4",
				"MASTER_ADDR=node0", "MASTER_PORT="+strconv.Itoa(23456+run))
			cmds = append(cmds, hostCmd{host: r, argv: append([]string{self}, train...), env: env})
		}
		return runOnHosts(t, b, cmds)
	}})
	checkTransports(t, log, 4, 4, "")
}

// TestNetbedSlurm: two nodes of two tasks each, with the variables srun
// gives its tasks. The master is the first node of SLURM_STEP_NODELIST
// (node0, resolved through the bed's hosts file) and the port comes from
// SLURM_JOB_ID. Besides the small model (recursive doubling) it trains
// one whose bucket takes the ring, with shared memory on (the
// hierarchical ring between the hosts' leaders: close to one host, not
// bitwise) and off (the same ring as one host --shm=false: bitwise).
func TestNetbedSlurm(t *testing.T) {
	netbedOrSkip(t)
	b := newNetbed(t, 2)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name         string
		extra        []string
		bitwiseNoShm bool
		hosts        int // as the link transports line counts them
		leaders      string
	}{
		{"small", nil, true, 2, "0,2"},
		{"ring", largeModel, false, 2, "0,2"},
		{"ring-noshm", append([]string{"--shm=false"}, largeModel...), true, 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := launchTwice(t,
				layout{world: 4, extra: tc.extra, bitwiseNoShm: tc.bitwiseNoShm, launch: func(run int, train []string) string {
					return runOnHosts(t, b, slurmTasks(self, netbedSecret(t), 4242+10*i+run, train))
				}})
			checkTransports(t, log, 4, tc.hosts, tc.leaders)
		})
	}
}

// slurmTasks are the four tasks of a two-node srun step, two per node,
// with the variables srun sets (the node list names the bed's hosts).
func slurmTasks(self, secret string, jobID int, train []string) []hostCmd {
	var cmds []hostCmd
	for r := range 4 {
		env := cleanEnv("GODDP_SECRET="+secret, "SLURM_JOB_ID="+strconv.Itoa(jobID), "SLURM_STEP_ID=0",
			"SLURM_PROCID="+strconv.Itoa(r), "SLURM_NTASKS=4", "SLURM_LOCALID="+strconv.Itoa(r%2),
			"SLURM_NODEID="+strconv.Itoa(r/2), "SLURM_JOB_NODELIST=node[0-1]", "SLURM_STEP_NODELIST=node[0-1]",
			"SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLURM_JOB_NUM_NODES=2")
		cmds = append(cmds, hostCmd{host: r / 2, argv: append([]string{self}, train...), env: env})
	}
	return cmds
}

// TestNetbedOwnLauncher: ddp-train as its own launcher on each of two
// hosts (--nnodes 2 --node-rank K --master-addr node0 --nproc 2), as
// torchrun's static rendezvous: node K's workers are ranks 2K and 2K+1.
func TestNetbedOwnLauncher(t *testing.T) {
	netbedOrSkip(t)
	b := newNetbed(t, 2)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := launchTwice(t, layout{world: 4, bitwiseNoShm: true, launch: func(run int, train []string) string {
		env := cleanEnv("GODDP_SECRET=" + netbedSecret(t))
		var cmds []hostCmd
		for h := range 2 {
			argv := append([]string{self, "--nnodes", "2", "--node-rank", strconv.Itoa(h), "--master-addr", "node0",
				"--master-port", strconv.Itoa(29600 + run), "--nproc", "2"}, train...)
			cmds = append(cmds, hostCmd{host: h, argv: argv, env: env})
		}
		return runOnHosts(t, b, cmds)
	}})
	checkTransports(t, log, 4, 2, "0,2")
	for _, want := range []string{`[rank 2] {`, `[rank 3] {`} {
		if !strings.Contains(log[strings.Index(log, "--- node1"):], want) {
			t.Errorf("node1's launcher printed no %q line: its workers are not ranks 2 and 3:\n%s", want, log)
		}
	}
}

// TestNetbedOwnLauncherProgram: ddp-train --nnodes launches a program of
// one's own (examples/multiproc, joining with dist.InitProcessGroup) on
// each of two hosts: its four ranks end with the same parameters, and
// node1's are ranks 2 and 3.
func TestNetbedOwnLauncherProgram(t *testing.T) {
	netbedOrSkip(t)
	prog := buildExample(t)
	b := newNetbed(t, 2)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("GODDP_SECRET=" + netbedSecret(t))
	var cmds []hostCmd
	for h := range 2 {
		cmds = append(cmds, hostCmd{host: h, env: env, argv: []string{self, "--nnodes", "2", "--node-rank", strconv.Itoa(h),
			"--master-addr", "node0", "--master-port", "29700", "--nproc", "2", prog}})
	}
	log := runOnHosts(t, b, cmds)
	got := exampleDigests(t, "ddp-train --nnodes 2", log, 4)
	for r, d := range got {
		if d != got["0"] {
			t.Fatalf("rank %s ended at %s, rank 0 at %s:\n%s", r, d, got["0"], log)
		}
	}
	node1 := log[strings.Index(log, "--- node1"):]
	if !regexp.MustCompile(`(?m)^\[rank 2\] rank 2 of 4`).MatchString(node1) ||
		!regexp.MustCompile(`(?m)^\[rank 3\] rank 3 of 4`).MatchString(node1) {
		t.Fatalf("node1's launcher did not run ranks 2 and 3:\n%s", log)
	}
}

// writeRshAgent writes the script Open MPI's rsh launcher calls as
// `AGENT HOST COMMAND...` in place of ssh: it runs COMMAND (Open MPI's
// orted line, quoted for a remote shell) through sh on HOST's namespace.
func writeRshAgent(t *testing.T, b *netbed.Bed) string {
	t.Helper()
	var s strings.Builder
	s.WriteString("#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n")
	for i, h := range b.Hosts() {
		fmt.Fprintf(&s, "%s|%s) exec %s sh -c \"$*\" ;;\n", h.Name, h.Addr, shellQuote(b.Wrap(i)))
	}
	s.WriteString("*) echo \"rsh agent: no host $host in the bed\" >&2; exit 255 ;;\nesac\n")
	path := filepath.Join(t.TempDir(), "rsh-agent")
	if err := os.WriteFile(path, []byte(s.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// shellQuote quotes every word for sh.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// mpirunOnBed runs mpirun on node0 with two slots on each of two hosts:
// node0's ranks it starts itself, node1's through the rsh agent's orted.
// extraEnv travel to every rank (-x); the log is returned.
func mpirunOnBed(t *testing.T, b *netbed.Bed, flags []string, extraEnv ...string) string {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("skipping: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{mpirun, "--allow-run-as-root", "--mca", "plm_rsh_agent", writeRshAgent(t, b),
		"--host", "node0:2,node1:2", "-np", "4", "-x", asMain, "-x", "GORACE"}
	for _, kv := range extraEnv {
		name, _, _ := strings.Cut(kv, "=")
		argv = append(argv, "-x", name)
	}
	argv = append(append(argv, self), flags...)
	return runOnHosts(t, b, []hostCmd{{host: 0, argv: argv, env: cleanEnv(extraEnv...)}})
}

// TestNetbedMpirunTCP: mpirun starts two ranks on each host (node1's
// through its rsh agent, as through ssh); ddp-train reads its ranks from
// Open MPI's variables and joins the tcp backend at MASTER_ADDR.
func TestNetbedMpirunTCP(t *testing.T) {
	netbedOrSkip(t)
	b := newNetbed(t, 2)
	log := launchTwice(t, layout{world: 4, bitwiseNoShm: true, launch: func(run int, train []string) string {
		return mpirunOnBed(t, b, train, "GODDP_SECRET="+netbedSecret(t),
			"MASTER_ADDR=node0", "MASTER_PORT="+strconv.Itoa(29500+run))
	}})
	checkTransports(t, log, 4, 2, "0,2")
}
