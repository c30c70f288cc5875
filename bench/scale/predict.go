package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/internal/cli"
)

// clusterFlags describe a family of clusters: one per world size.
type clusterFlags struct {
	file         string
	ranks        string
	ranksPerHost int
	inter, intra string
	interLat     time.Duration
	intraLat     time.Duration
	shm          bool
}

// clusterFile is --cluster's JSON.
type clusterFile struct {
	Ranks         []int   `json:"ranks"`
	RanksPerHost  int     `json:"ranks_per_host"`
	InterBitsPerS float64 `json:"inter_bits_per_s"`
	InterLatencyS float64 `json:"inter_latency_s"`
	IntraBitsPerS float64 `json:"intra_bits_per_s"`
	IntraLatencyS float64 `json:"intra_latency_s"`
	SharedMemory  bool    `json:"shared_memory"`
}

func (f *clusterFlags) register(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	DurationVar(*time.Duration, string, time.Duration, string)
	BoolVar(*bool, string, bool, string)
}) {
	fs.StringVar(&f.file, "cluster", "", "a JSON cluster description (ranks, ranks_per_host, inter_bits_per_s, "+
		"inter_latency_s, intra_bits_per_s, intra_latency_s, shared_memory); overrides the flags below")
	fs.StringVar(&f.ranks, "ranks", "2,4,8,16,32,64,128,256,512,1024", "world sizes, comma-separated")
	fs.IntVar(&f.ranksPerHost, "ranks-per-host", 8, "ranks per host (a world smaller than this is one host)")
	fs.StringVar(&f.inter, "inter", "25gbit",
		"bandwidth of each host's link, each direction (tc units: 100mbit, 1gbit, 25gbit)")
	fs.DurationVar(&f.interLat, "inter-latency", 10*time.Microsecond,
		"one-way latency of a message between hosts, software included")
	fs.StringVar(&f.intra, "intra", "80gbit", "bandwidth between two ranks of one host")
	fs.DurationVar(&f.intraLat, "intra-latency", 2*time.Microsecond, "one-way latency of a message within a host")
	fs.BoolVar(&f.shm, "shm", true,
		"pg/tcp's shared memory is on (then auto is hierarchical across hosts of several ranks)")
}

// clusters builds one cluster per world size.
func (f clusterFlags) clusters() ([]scalemodel.Cluster, error) {
	cf := clusterFile{RanksPerHost: f.ranksPerHost, InterLatencyS: f.interLat.Seconds(),
		IntraLatencyS: f.intraLat.Seconds(), SharedMemory: f.shm}
	var err error
	if f.file != "" {
		b, err := os.ReadFile(f.file)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &cf); err != nil {
			return nil, fmt.Errorf("--cluster %s: %w", f.file, err)
		}
	} else {
		if cf.Ranks, err = cli.ParseInts(f.ranks); err != nil {
			return nil, fmt.Errorf("--ranks: %w", err)
		}
		if cf.InterBitsPerS, err = parseRate(f.inter); err != nil {
			return nil, fmt.Errorf("--inter: %w", err)
		}
		if cf.IntraBitsPerS, err = parseRate(f.intra); err != nil {
			return nil, fmt.Errorf("--intra: %w", err)
		}
	}
	var out []scalemodel.Cluster
	for _, p := range cf.Ranks {
		k := min(max(cf.RanksPerHost, 1), p)
		if p < 1 || p%k != 0 {
			return nil, fmt.Errorf("%d ranks do not fill hosts of %d", p, k)
		}
		c := scalemodel.Cluster{Hosts: p / k, RanksPerHost: k, SharedMemory: cf.SharedMemory,
			Inter: scalemodel.Link{Latency: cf.InterLatencyS, Bandwidth: cf.InterBitsPerS / 8},
			Intra: scalemodel.Link{Latency: cf.IntraLatencyS, Bandwidth: cf.IntraBitsPerS / 8}}
		if err := c.Validate(); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// parseRate reads tc's units into bits per second.
func parseRate(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		bits   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || !(v > 0) {
				break
			}
			return v * u.bits, nil
		}
	}
	return 0, fmt.Errorf("rate %q: want a number with gbit, mbit, kbit or bit", s)
}

func runPredict(args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("scale predict", stderr)
	var src profileSource
	src.register(fs)
	var cf clusterFlags
	cf.register(fs)
	algos := fs.String("algorithms", "auto,ring,doubling,hierarchical",
		"allreduce algorithms, comma-separated: auto (what pg/tcp picks), ring, doubling, hierarchical")
	hooks := fs.String("hooks", "allreduce,fp16,powersgd:1,powersgd:4",
		"comm hooks, comma-separated: allreduce, fp16, bf16, powersgd:R")
	var df dilocoFlags
	df.register(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	p, err := src.load()
	if err != nil {
		return cli.Usage(err)
	}
	cs, err := cf.clusters()
	if err != nil {
		return cli.Usage(err)
	}
	as, hs, err := parseLists(*algos, *hooks)
	if err != nil {
		return cli.Usage(err)
	}
	ds, err := df.configs()
	if err != nil {
		return cli.Usage(err)
	}
	fmt.Fprintf(stdout, "# profile: forward %.2f ms, backward %.2f ms, other %.2f ms, %d buckets, %.0f bytes\n",
		p.Forward*1e3, p.Backward*1e3, p.Other*1e3, len(p.Buckets), totalBytes(p))
	if ds != nil {
		return printDiLoCo(stdout, p, cs, as, ds, df.quantize)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ranks\thosts\talgorithm\thook\tstep_ms\tcomm_ms\texposed_ms\thidden_%\tefficiency_%\t")
	for _, c := range cs {
		for _, a := range as {
			for _, h := range hs {
				pr := scalemodel.Predict(p, c, a, h)
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.0f\t%.1f\t\n", c.Ranks(), c.Hosts, a, h,
					pr.Step*1e3, pr.Comm*1e3, pr.Exposed*1e3, pr.Hidden*100, pr.Efficiency*100)
			}
		}
	}
	return tw.Flush()
}

func parseLists(algos, hooks string) ([]scalemodel.Algorithm, []scalemodel.Hook, error) {
	var as []scalemodel.Algorithm
	var hs []scalemodel.Hook
	for _, s := range strings.Split(algos, ",") {
		a, err := scalemodel.ParseAlgorithm(strings.TrimSpace(s))
		if err != nil {
			return nil, nil, err
		}
		as = append(as, a)
	}
	for _, s := range strings.Split(hooks, ",") {
		h, err := scalemodel.ParseHook(strings.TrimSpace(s))
		if err != nil {
			return nil, nil, err
		}
		hs = append(hs, h)
	}
	if len(as) == 0 || len(hs) == 0 {
		return nil, nil, errors.New("want at least one algorithm and one hook")
	}
	return as, hs, nil
}

func totalBytes(p scalemodel.Profile) float64 {
	var s float64
	for _, b := range p.Buckets {
		s += b.Bytes
	}
	return s
}
