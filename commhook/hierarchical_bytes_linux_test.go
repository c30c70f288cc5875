//go:build linux

package commhook_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// Note [counting bytes between hosts]: to show what hierarchical
// allreduce saves between hosts, TestHierarchicalSavesInterHostBytes
// runs 4 pg/tcp ranks as 4 processes (this test binary, re-run as
// TestHierarchicalBytesRank), ranks 0 and 1 on simulated host 0 and
// ranks 2 and 3 on host 1. Around one allreduce of the bucket, every
// process reads the kernel's byte counter (TCP_INFO's tcpi_bytes_received)
// of each of its TCP sockets, with the socket's two addresses. The parent
// learns which process owns every address, so each socket's peer process
// is known, and sums what the sockets between processes of different
// hosts received: payload bytes (pg/tcp frames with their headers), every
// connection of the world group and of the subgroups, nothing attributed
// by algorithm. Sockets to the store are left out, as are TCP/IP headers.
// Each rank reads its counters, then enters a barrier, then starts the
// allreduce, so that no rank's data can arrive before a reading; the
// barrier's few hundred bytes are counted with the allreduce's.

var hierarchicalMiB = flag.Int("hierarchical.mib", 16, "bucket size, in MiB, of TestHierarchicalSavesInterHostBytes")

const hierBytesEnv = "GODDP_COMMHOOK_HIERBYTES_RANK"

// hierBytesJob is what the parent passes a rank process.
type hierBytesJob struct {
	Rank, Size, RanksPerHost int
	Store, Prefix, Hook, Out string
	Elems                    int
}

// sockBytes is one socket's reading.
type sockBytes struct {
	Local, Remote string
	Received      uint64
}

// socketBytes reads every TCP socket of this process.
func socketBytes() (map[string]sockBytes, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	out := map[string]sockBytes{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		la, err1 := unix.Getsockname(fd)
		ra, err2 := unix.Getpeername(fd)
		info, err3 := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		l4, ok1 := la.(*unix.SockaddrInet4)
		r4, ok2 := ra.(*unix.SockaddrInet4)
		if err1 != nil || err2 != nil || err3 != nil || !ok1 || !ok2 {
			continue // a listener, or not TCP over IPv4
		}
		s := sockBytes{Local: addrString(l4), Remote: addrString(r4), Received: info.Bytes_received}
		out[s.Local+">"+s.Remote] = s
	}
	return out, nil
}

func addrString(a *unix.SockaddrInet4) string {
	return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
}

// TestHierarchicalBytesRank is one rank of the measurement; it runs only
// when the parent test starts it.
func TestHierarchicalBytesRank(t *testing.T) {
	spec := os.Getenv(hierBytesEnv)
	if spec == "" {
		t.Skip("a rank process of TestHierarchicalSavesInterHostBytes")
	}
	var job hierBytesJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatal(err)
	}
	if err := hierBytesRank(job); err != nil {
		t.Fatalf("rank %d: %v", job.Rank, err)
	}
}

func hierBytesRank(job hierBytesJob) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secret := []byte("commhook-hierbytes-secret-0123456789")
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: job.Store, Secret: secret, Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer st.Close()
	g, err := tcp.New(ctx, store.NewPrefixStore(job.Prefix, st),
		tcp.Options{Rank: job.Rank, Size: job.Size, Secret: secret,
			ListenAddr: "127.0.0.1:0", Timeout: time.Minute,
			// The simulated hosts stand for machines, which share no memory:
			// every byte must cross a socket to be counted.
			NoSharedMemory: true})
	if err != nil {
		return err
	}
	defer g.Close()
	var h commhook.Hook = commhook.Allreduce{}
	if job.Hook == "hierarchical" {
		hh, err := commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: job.RanksPerHost})
		if err != nil {
			return err
		}
		defer hh.Close()
		if err := hh.Setup(ctx, g); err != nil {
			return err
		}
		h = hh
	}
	buf := make([]float32, job.Elems)
	for i := range buf {
		buf[i] = float32(job.Rank + i%7)
	}
	b := &commhook.GradBucket{Buffer: pg.Float32s(buf), IsLast: true,
		Params: []commhook.ParamView{{Name: "w", Shape: []int{job.Elems}, Len: job.Elems}}}
	// Read the counters before the barrier: after it, a faster rank may
	// already be sending this one the bucket.
	before, err := socketBytes()
	if err != nil {
		return err
	}
	if err := g.Barrier(ctx).Wait(ctx); err != nil {
		return err
	}
	if err := h.Run(ctx, g, b).Wait(ctx); err != nil {
		return err
	}
	after, err := socketBytes()
	if err != nil {
		return err
	}
	// Check the result: the average of rank + i%7 over 4 ranks.
	for i := 0; i < len(buf); i += 4099 {
		if want := float32(1.5 + float64(i%7)); buf[i] != want {
			return fmt.Errorf("element %d = %v, want %v", i, buf[i], want)
		}
	}
	var delta []sockBytes
	for k, s := range after {
		s.Received -= before[k].Received
		delta = append(delta, s)
	}
	out, err := json.Marshal(delta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(job.Out, out, 0o600); err != nil {
		return err
	}
	return g.Barrier(ctx).Wait(ctx) // no rank closes its sockets before every rank has read them
}

// interHostBytes runs one allreduce of hook on 4 rank processes, 2 per
// simulated host, and returns the bytes received across hosts and in all.
func interHostBytes(t *testing.T, ctx context.Context, storeAddr, hook string, elems int) (cross, total uint64) {
	t.Helper()
	const size, perHost = 4, 2
	dir := t.TempDir()
	owner := map[string]int{}
	socks := make([][]sockBytes, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		job := hierBytesJob{Rank: r, Size: size, RanksPerHost: perHost, Store: storeAddr, Prefix: hook + "/",
			Hook: hook, Out: filepath.Join(dir, strconv.Itoa(r)+".json"), Elems: elems}
		spec, _ := json.Marshal(job)
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHierarchicalBytesRank$", "-test.count=1")
			cmd.Env = append(os.Environ(), hierBytesEnv+"="+string(spec))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[r] = fmt.Errorf("%v\n%s", err, out)
				return
			}
			data, err := os.ReadFile(job.Out)
			if err == nil {
				err = json.Unmarshal(data, &socks[r])
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s rank %d: %v", hook, r, err)
		}
	}
	for r, ss := range socks {
		for _, s := range ss {
			owner[s.Local] = r
		}
	}
	for r, ss := range socks {
		for _, s := range ss {
			peer, ok := owner[s.Remote]
			if !ok {
				continue // the store
			}
			total += s.Received
			if r/perHost != peer/perHost {
				cross += s.Received
			}
		}
	}
	return cross, total
}

// TestHierarchicalSavesInterHostBytes measures, with the kernel's
// counters, the bytes that cross between 2 simulated hosts of 2 ranks
// each for one allreduce of a bucket, flat (Allreduce) and hierarchical;
// see Note [counting bytes between hosts]. -hierarchical.mib sets the
// bucket size (docs/comm-hooks.md quotes 64).
func TestHierarchicalSavesInterHostBytes(t *testing.T) {
	if os.Getenv(hierBytesEnv) != "" {
		t.Skip("in a rank process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := store.NewServer(ctx,
		store.ServerOptions{Addr: "127.0.0.1:0", Secret: []byte("commhook-hierbytes-secret-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	bytes := *hierarchicalMiB << 20
	elems := bytes / 4
	flatCross, flatTotal := interHostBytes(t, ctx, srv.Addr(), "flat", elems)
	hierCross, hierTotal := interHostBytes(t, ctx, srv.Addr(), "hierarchical", elems)
	mib := func(n uint64) string {
		return fmt.Sprintf("%d bytes = %.2f MiB (%.3f× the bucket)", n, float64(n)/(1<<20), float64(n)/float64(bytes))
	}
	t.Logf("bucket %d MiB float32, 2 hosts × 2 ranks, pg/tcp", *hierarchicalMiB)
	t.Logf("flat allreduce:          between hosts %s, all links %s", mib(flatCross), mib(flatTotal))
	t.Logf("hierarchical allreduce:  between hosts %s, all links %s", mib(hierCross), mib(hierTotal))
	t.Logf("between hosts, hierarchical/flat = %.3f", float64(hierCross)/float64(flatCross))
	// The leaders' 2-rank allreduce moves the bucket once each way: 2×
	// the bucket, plus frame headers.
	if hierCross < uint64(2*bytes) || hierCross > uint64(2*bytes)+uint64(bytes)/100 {
		t.Errorf("hierarchical: %d bytes between hosts, want 2× the bucket (%d) plus headers", hierCross, 2*bytes)
	}
	if hierCross >= flatCross {
		t.Errorf("hierarchical sent %d bytes between hosts, flat %d: no saving", hierCross, flatCross)
	}
}
