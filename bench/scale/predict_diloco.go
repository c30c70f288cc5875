package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/internal/cli"
)

// dilocoFlags are predict's DiLoCo flags, as ddp-train's.
type dilocoFlags struct {
	syncEvery string // H, comma-separated; "" predicts DDP
	fragments int
	delay     int
	quantize  string
}

func (f *dilocoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.syncEvery, "diloco-sync-every", "", "predict DiLoCo (ddp-train --diloco-sync-every) at these H, "+
		"comma-separated, against DDP's allreduce, instead of the hooks' table")
	fs.IntVar(&f.fragments, "diloco-fragments", 1, "with --diloco-sync-every: Streaming DiLoCo's fragments")
	fs.IntVar(&f.delay, "diloco-delay", 0,
		"with --diloco-sync-every: inner steps a fragment's reduction overlaps before it is applied")
	fs.StringVar(&f.quantize, "diloco-quantize", "none",
		"with --diloco-sync-every: the pseudo-gradients on the wire: none (the parameters' dtype), fp16 or bf16")
}

// configs are the DiLoCo settings to predict, one per H; nil without
// --diloco-sync-every.
func (f dilocoFlags) configs() ([]scalemodel.DiLoCo, error) {
	if f.syncEvery == "" {
		return nil, nil
	}
	hs, err := cli.ParseInts(f.syncEvery)
	if err != nil {
		return nil, fmt.Errorf("--diloco-sync-every: %w", err)
	}
	var q float64
	switch f.quantize {
	case "none":
	case "fp16", "bf16":
		q = 2
	default:
		return nil, fmt.Errorf("--diloco-quantize %q: want none, fp16 or bf16", f.quantize)
	}
	var out []scalemodel.DiLoCo
	for _, h := range hs {
		d := scalemodel.DiLoCo{SyncEvery: h, Fragments: f.fragments, Delay: f.delay, QuantizeBytes: q}
		if err := d.Validate(); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// printDiLoCo is predict's DiLoCo table: per world size, algorithm and H,
// DiLoCo's mean step and bytes per step against DDP's.
func printDiLoCo(w io.Writer, p scalemodel.Profile, cs []scalemodel.Cluster, as []scalemodel.Algorithm,
	ds []scalemodel.DiLoCo, quantize string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ranks\thosts\talgorithm\tH\tfragments\tdelay\tquantize\tstep_ms\tsync_ms\texposed_ms\t"+
		"hidden_%\tbytes/step\thost_tx/step\tddp_step_ms\tddp_host_tx/step\tspeedup\t")
	for _, c := range cs {
		for _, a := range as {
			for _, d := range ds {
				pr := scalemodel.PredictDiLoCo(p, c, a, d)
				fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%s\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f\t%.0f\t%.2f\t\n",
					c.Ranks(), c.Hosts, a, d.SyncEvery, max(d.Fragments, 1), d.Delay, quantize, pr.Step*1e3,
					pr.Sync*1e3, pr.Exposed*1e3, pr.Hidden*100, pr.BytesSent, pr.Traffic.HostSent, pr.DDP.Step*1e3,
					pr.DDPTraffic.HostSent, pr.Speedup)
			}
		}
	}
	return tw.Flush()
}
