package tcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/goddp/ddp/internal/netbed"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// netbedWorkerEnv, when set to "rank size storeAddr listenIP", makes this
// test binary a rank on a netbed host: it joins the group (rank 0 hosts
// the TCPStore), logs in JSON to stdout (the "link transports" line among
// them), runs one AllReduce of netbedValue(rank) and prints "sum S".
const netbedWorkerEnv = "GODDP_TCP_NETBED_WORKER"

func runNetbedWorker(spec string) int {
	var rank, size int
	var addr, ip string
	if _, err := fmt.Sscanf(spec, "%d %d %s %s", &rank, &size, &addr, &ip); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad spec:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: addr, IsServer: rank == 0, Secret: testSecret})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: store:", err)
		return 2
	}
	defer st.Close()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stdout),
		zap.InfoLevel))
	g, err := New(ctx, st,
		Options{Rank: rank, Size: size, Secret: testSecret, ListenAddr: ip + ":0", Timeout: 20 * time.Second, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: New:", err)
		return 2
	}
	defer g.Close()
	v := []float32{netbedValue(rank)}
	buf := pg.Float32s(v)
	if err := g.AllReduce(ctx, buf, pg.Op(pg.Sum)).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker: AllReduce:", err)
		return 1
	}
	fmt.Printf("sum %v\n", v[0])
	// Stay until every rank has its result: closing early would fail a
	// peer still reading.
	if err := g.Barrier(ctx).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker: Barrier:", err)
		return 1
	}
	return 0
}

// netbedValue is a rank's input: their float32 sum depends on the
// order. The hierarchical allreduce adds within each host first, (1e8 +
// -1e8) + (1 + 1) = 2; recursive doubling over all four ranks adds (1e8 +
// 1) + (-1e8 + 1), and 1e8 + 1 rounds to 1e8 in float32, giving 0.
func netbedValue(rank int) float32 { return [...]float32{1e8, 1, -1e8, 1}[rank%4] }

// TestNetbedShmGroupsPerNamespace: two hosts of a netbed (network
// namespaces on one machine, one boot id), two ranks each, interleaved
// (ranks 0 and 2 on node0, 1 and 3 on node1). The ranks of each
// namespace share memory with each other and with no one else; every
// rank sees 2 hosts with leaders 0 and 1, and the AllReduce goes the
// hierarchical way (its sum, 2, is what adding within hosts first gives:
// netbedValue; a flat AllReduce gives 0). The old agreement dropped
// ranks one by one and gave 3 hosts.
func TestNetbedShmGroupsPerNamespace(t *testing.T) {
	b := netbed.ForTest(t, os.Getenv("GODDP_TEST_NETBED") == "1", netbed.Options{Hosts: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hosts := b.Hosts()
	storeAddr := hosts[0].Addr + ":29611"
	const size = 4
	outs := make([]*bufio.Scanner, size)
	waits := make([]func() error, size)
	for r := range size {
		h := hosts[r%2]
		cmd := b.Command(ctx, h.Index, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s", netbedWorkerEnv, r, size, storeAddr, h.Addr))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		outs[r], waits[r] = bufio.NewScanner(out), cmd.Wait
	}
	for r := range size {
		transports, sum := readNetbedWorker(t, outs[r])
		if err := waits[r](); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if sum != "sum 2" {
			t.Errorf("rank %d: %q, want sum 2 (the hierarchical order of addition)", r, sum)
		}
		wantShm := []int{(r + 2) % 4}
		if fmt.Sprint(transports.Shm) != fmt.Sprint(wantShm) || transports.Hosts != 2 ||
			fmt.Sprint(transports.Leaders) != "[0 1]" {
			t.Errorf("rank %d: link transports shm=%v hosts=%d leaders=%v, want shm=%v hosts=2 leaders=[0 1]",
				r, transports.Shm, transports.Hosts, transports.Leaders, wantShm)
		}
	}
}

type transportsLine struct {
	Msg     string `json:"msg"`
	Shm     []int  `json:"shm"`
	Hosts   int    `json:"hosts"`
	Leaders []int  `json:"leaders"`
}

func readNetbedWorker(t *testing.T, sc *bufio.Scanner) (transportsLine, string) {
	var tl transportsLine
	var last string
	for sc.Scan() {
		line := sc.Text()
		var l transportsLine
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "link transports" {
			tl = l
		}
		if strings.HasPrefix(line, "sum ") {
			last = line
		}
	}
	return tl, last
}
