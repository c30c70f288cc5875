package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func report(w io.Writer, o options, rows []row) {
	dims := make([]string, len(o.sizes))
	for i, s := range o.sizes {
		dims[i] = fmt.Sprint(s)
	}
	var base row
	for _, r := range rows {
		if r.label == "allreduce" {
			base = r
		}
	}
	ratio := func(r row) float64 {
		if r.bytes == 0 {
			return 0
		}
		return float64(base.bytes) / float64(r.bytes)
	}
	if o.format == "csv" {
		fmt.Fprintln(w,
			"hook,grad_bytes,bytes_per_step,allreduces_per_step,ratio_vs_allreduce,torch_compression_rate,cpu_ms_per_mib")
		for _, r := range rows {
			fmt.Fprintf(w, "%s,%d,%d,%d,%.2f,%.2f,%.3f\n", r.label, r.gradBytes, r.bytes, r.collectives, ratio(r), r.torchRate,
				float64(r.cpuPerMiB.Microseconds())/1000)
		}
		return
	}
	fmt.Fprintf(w, "# commhooks: MLP %s float32, %d gradient bytes; bytes per step per rank with %d ranks and the "+
		"reducer's default buckets; CPU per MiB on one rank, mean of %d steps\n",
		strings.Join(dims, "-"), rows[0].gradBytes, o.nproc, o.steps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hook\tbytes/step\tallreduces\tvs allreduce\ttorch rate\tCPU ms/MiB\t")
	for _, r := range rows {
		rate := "-"
		if r.torchRate > 0 {
			rate = fmt.Sprintf("%.1f", r.torchRate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1fx\t%s\t%.3f\t\n", r.label, r.bytes, r.collectives, ratio(r), rate,
			float64(r.cpuPerMiB.Microseconds())/1000)
	}
	tw.Flush()
}
