package netbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// namePrefix starts the name of everything a bed creates: namespaces,
// veths and the bridge. Interface names are at most 15 bytes, so names
// stay short: "gdb" + owner pid + "x" + a sequence + a role and index.
const namePrefix = "gdb"

// etcNetns holds a directory per namespace whose files `ip netns exec`
// bind-mounts over their namesakes in /etc for what it runs: a bed's
// hosts file goes there, and the machine's own /etc/hosts is untouched.
const etcNetns = "/etc/netns"

// Options says what bed to build.
type Options struct {
	Hosts int    // how many hosts, at least 1 and at most 100 (interface names are at most 15 bytes)
	Rate  string // tc rate for every host's link ("1gbit", "100mbit"); "" leaves links uncapped
	// Subnet's first three octets; the hosts get .1, .2, ... Default "10.98.0".
	Subnet string
	Logf   func(format string, args ...any) // where the bed says what it does; nil is silent
}

// Host is one host of a bed.
type Host struct {
	Index    int
	Name     string // its hostname inside commands run on it: "node0", "node1", ...
	Addr     string // its IPv4 address on the bridge
	NS       string // the network namespace's name (ip netns)
	Link     string // its veth inside the namespace
	peerLink string // the veth's other end, on the bridge
}

// Bed is a set of hosts on one bridge. Its methods may not be called
// concurrently with Close.
type Bed struct {
	prefix string
	bridge string
	hosts  []Host
	logf   func(string, ...any)
	closed bool
	// life ends at Close, and with it every Command's process, even one
	// that has not entered its host's namespace yet (ip netns exec opens
	// the namespace, then joins it), which Close's sweep of the
	// namespace's pids cannot see.
	life context.Context
	end  context.CancelFunc
}

// Available returns nil where this machine can build beds, or an error
// that says what is missing.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netbed: needs root (network namespaces, veths, a bridge)")
	}
	for _, tool := range []string{"ip", "tc", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("netbed: %s is not installed (apt-get install iproute2 util-linux)", tool)
		}
	}
	return nil
}

// claimBridge creates the bed's bridge under the first free name: the
// kernel refuses a name that exists, so beds built at once, by one process
// or several, never share one. The bridge's name gives the bed's prefix.
func claimBridge(ctx context.Context) (prefix string, err error) {
	own := namePrefix + strconv.Itoa(os.Getpid()) + "x"
	for n := range 10 {
		prefix = own + strconv.Itoa(n)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "ip", "link", "add", prefix+"br", "type", "bridge")
		cmd.Stderr = &stderr
		if err = cmd.Run(); err == nil {
			return prefix, nil
		}
		if !strings.Contains(stderr.String(), "exists") {
			return "", fmt.Errorf("netbed: ip link add %sbr type bridge: %w: %s", prefix, err,
				strings.TrimSpace(stderr.String()))
		}
	}
	return "", errors.New("netbed: this process already has 10 beds; close some")
}

// New builds a bed. On failure it removes what it built.
func New(ctx context.Context, o Options) (*Bed, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Hosts < 1 || o.Hosts > 100 {
		return nil, fmt.Errorf("netbed: Hosts is %d; it must be 1 to 100", o.Hosts)
	}
	if o.Subnet == "" {
		o.Subnet = "10.98.0"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := Sweep(ctx); err != nil {
		o.Logf("netbed: sweeping dead beds: %v", err)
	}
	prefix, err := claimBridge(ctx)
	if err != nil {
		return nil, err
	}
	b := &Bed{prefix: prefix, bridge: prefix + "br", logf: o.Logf}
	b.life, b.end = context.WithCancel(context.Background())
	if err := b.build(ctx, o); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	o.Logf("netbed: %d hosts on bridge %s (%s.1-%d)", o.Hosts, b.bridge, o.Subnet, o.Hosts)
	return b, nil
}

func (b *Bed) build(ctx context.Context, o Options) error {
	if err := run(ctx, "ip", "link", "set", b.bridge, "up"); err != nil {
		return err
	}
	for i, h := range Plan(o, b.prefix) {
		b.hosts = append(b.hosts, h)
		if err := b.addHost(ctx, h); err != nil {
			return err
		}
		if o.Rate != "" {
			if err := b.SetRate(ctx, i, o.Rate); err != nil {
				return err
			}
		}
	}
	return b.writeHosts()
}

// writeHosts gives every host an /etc/hosts that names every host of the
// bed (node0, node1, ...), as a cluster's DNS would: what runs on a host
// resolves the others' names, and nothing outside the bed sees them.
func (b *Bed) writeHosts() error {
	var sb strings.Builder
	sb.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, h := range b.hosts {
		fmt.Fprintf(&sb, "%s\t%s\n", h.Addr, h.Name)
	}
	for _, h := range b.hosts {
		dir := filepath.Join(etcNetns, h.NS)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("netbed: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(sb.String()), 0o644); err != nil {
			return fmt.Errorf("netbed: %w", err)
		}
	}
	return nil
}

func (b *Bed) addHost(ctx context.Context, h Host) error {
	steps := [][]string{
		{"ip", "netns", "add", h.NS},
		{"ip", "link", "add", h.Link, "type", "veth", "peer", "name", h.peerLink},
		{"ip", "link", "set", h.peerLink, "master", b.bridge},
		{"ip", "link", "set", h.peerLink, "up"},
		{"ip", "link", "set", h.Link, "netns", h.NS},
		{"ip", "-n", h.NS, "addr", "add", h.Addr + "/24", "dev", h.Link},
		{"ip", "-n", h.NS, "link", "set", h.Link, "up"},
		{"ip", "-n", h.NS, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// Plan returns the hosts New builds for o under a bed's name prefix,
// without building them.
func Plan(o Options, prefix string) []Host {
	if o.Subnet == "" {
		o.Subnet = "10.98.0"
	}
	hosts := make([]Host, o.Hosts)
	for i := range hosts {
		n := strconv.Itoa(i)
		hosts[i] = Host{
			Index: i, Name: "node" + n, Addr: o.Subnet + "." + strconv.Itoa(i+1),
			NS: prefix + "h" + n, Link: prefix + "v" + n, peerLink: prefix + "p" + n,
		}
	}
	return hosts
}

// Hosts returns the bed's hosts, in index order.
func (b *Bed) Hosts() []Host { return append([]Host(nil), b.hosts...) }

// Addrs returns every host's address, in index order.
func (b *Bed) Addrs() []string {
	out := make([]string, len(b.hosts))
	for i, h := range b.hosts {
		out[i] = h.Addr
	}
	return out
}

// Wrap returns the argv that runs argv on host i: inside its network
// namespace, in a UTS namespace of its own whose hostname is the host's
// name. Use it where something else starts the process (Open MPI's rsh
// agent, a shell script); Command builds an exec.Cmd from it.
func (b *Bed) Wrap(i int, argv ...string) []string {
	h := b.hosts[i]
	return append([]string{
		"ip", "netns", "exec", h.NS, "unshare", "--uts", "--",
		"sh", "-c", `hostname "$0" && exec "$@"`, h.Name,
	}, argv...)
}

// Command is exec.CommandContext for a command run on host i. Its
// process is killed when ctx ends, and by Close if it is still running.
func (b *Bed) Command(ctx context.Context, i int, name string, arg ...string) *exec.Cmd {
	argv := b.Wrap(i, append([]string{name}, arg...)...)
	ctx, stop := context.WithCancel(ctx)
	context.AfterFunc(b.life, stop)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// SetLink takes host i's link down (a partition: it reaches no other
// host) or brings it back up.
func (b *Bed) SetLink(ctx context.Context, i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	b.logf("netbed: %s's link %s", b.hosts[i].Name, state)
	return run(ctx, "ip", "-n", b.hosts[i].NS, "link", "set", b.hosts[i].Link, state)
}

// SetRate caps host i's link at rate (tc's units: "1gbit", "100mbit") in
// both directions, replacing any cap; "" removes the cap. The bucket
// holds 1/100 of a second at that rate (at least 32 KiB), so a burst
// cannot beat the rate by much, and a queue of 0.4 s.
func (b *Bed) SetRate(ctx context.Context, i int, rate string) error {
	h := b.hosts[i]
	for _, dev := range [][]string{{"ip", "netns", "exec", h.NS, "tc"}, {"tc"}} {
		link := h.Link
		if len(dev) == 1 {
			link = h.peerLink // the bridge side shapes what flows into the host
		}
		_ = exec.CommandContext(ctx, dev[0], append(dev[1:], "qdisc", "del", "dev", link, "root")...).Run()
		if rate == "" {
			continue
		}
		burst, err := burstFor(rate)
		if err != nil {
			return err
		}
		args := append(dev[1:], "qdisc", "add", "dev", link, "root", "tbf", "rate", rate, "burst", burst, "latency", "400ms")
		if err := run(ctx, dev[0], args...); err != nil {
			return err
		}
	}
	b.logf("netbed: %s's link capped at %q", h.Name, rate)
	return nil
}

// burstFor is the bucket size for rate: 10 ms of it, at least 32 KiB.
func burstFor(rate string) (string, error) {
	units := []struct {
		suffix string
		bits   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(rate, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || v <= 0 {
				break
			}
			bytes := max(int(v*u.bits/8/100), 32<<10)
			return strconv.Itoa(bytes) + "b", nil
		}
	}
	return "", fmt.Errorf("netbed: rate %q: want a number with gbit, mbit, kbit or bit", rate)
}

// Close kills every process still on the bed's hosts and removes the
// namespaces, veths and bridge. It is safe to call twice.
func (b *Bed) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.end()
	return removeBed(context.Background(), b.prefix)
}

// removeBed removes every namespace and link whose name starts with prefix.
func removeBed(ctx context.Context, prefix string) error {
	var errs []error
	for _, ns := range listNamespaces(prefix) {
		killIn(ctx, ns)
		if err := run(ctx, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(etcNetns, prefix+"*"))
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("netbed: %w", err))
		}
	}
	for _, link := range listLinks(prefix) {
		// Deleting one end of a veth deletes both; the other may be gone.
		_ = exec.CommandContext(ctx, "ip", "link", "del", link).Run()
	}
	if left := listLinks(prefix); len(left) > 0 {
		errs = append(errs, fmt.Errorf("netbed: links left after removing %s: %v", prefix, left))
	}
	return errors.Join(errs...)
}

// killIn SIGKILLs every process in namespace ns and waits up to 5 s for
// them to go.
func killIn(ctx context.Context, ns string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Sweep removes the beds of processes that no longer run: what a test
// killed with SIGKILL left behind.
func Sweep(ctx context.Context) error {
	var errs []error
	seen := map[string]bool{}
	for _, name := range append(listNamespaces(namePrefix), listLinks(namePrefix)...) {
		pid, ok := ownerPid(name)
		if !ok || seen[strconv.Itoa(pid)] {
			continue
		}
		seen[strconv.Itoa(pid)] = true
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // alive (or a pid reused: its bed stays until that process is gone)
		}
		errs = append(errs, removeBed(ctx, namePrefix+strconv.Itoa(pid)+"x"))
	}
	return errors.Join(errs...)
}

// ownerPid reads the owner's pid out of a name New made.
func ownerPid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "x")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

func listNamespaces(prefix string) []string {
	out, _ := exec.Command("ip", "netns", "list").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

func listLinks(prefix string) []string {
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		// "12: gdb1x0v0@if11: <...>"
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

// run runs one setup command and returns its stderr in the error.
func run(ctx context.Context, name string, arg ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netbed: %s %s: %w: %s", name, strings.Join(arg, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
