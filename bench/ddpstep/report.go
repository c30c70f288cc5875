package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// row is one figure of the report, printed as a table line or CSV.
type row struct {
	key   string // CSV name
	label string // table label
	value float64
	unit  string // "ms", "x" (a ratio) or "fraction"
}

// summarize turns one rank's samples into the report's rows: medians of
// times, the median of each DDP step's ratio to the plain step run just
// before it, and overlap as total hidden over total communication.
func summarize(res rankResult) []row {
	ss := res.samples
	med := func(f func(sample) time.Duration) float64 {
		return median(ss, func(s sample) float64 { return ms(f(s)) })
	}
	var comm, hidden time.Duration
	for _, s := range ss {
		comm += s.comm
		hidden += s.hidden
	}
	rows := []row{
		{"step_no_ddp_ms", "step without DDP", med(func(s sample) time.Duration { return s.plain }), "ms"},
		{"forward_no_ddp_ms", "  forward", med(func(s sample) time.Duration { return s.plainFwd }), "ms"},
		{"backward_no_ddp_ms", "  backward", med(func(s sample) time.Duration { return s.plainBwd }), "ms"},
		{"solver_no_ddp_ms", "  solver step and Reset", med(func(s sample) time.Duration { return s.plainAfter }), "ms"},
		{"step_ddp_ms", "step with DDP", med(func(s sample) time.Duration { return s.step }), "ms"},
		{"before_runall_ddp_ms", "  before RunAll (Prepare)", med(func(s sample) time.Duration { return s.before }), "ms"},
		{"forward_ddp_ms", "  forward", med(func(s sample) time.Duration { return s.fwd }), "ms"},
		{"backward_ddp_ms", "  backward", med(func(s sample) time.Duration { return s.bwd }), "ms"},
		{"wait_after_runall_ms", "  wait after RunAll", med(func(s sample) time.Duration { return s.wait }), "ms"},
		{"solver_ddp_ms", "  solver step and Reset", med(func(s sample) time.Duration { return s.after }), "ms"},
		{"step_ratio", "DDP step / step without DDP",
			median(ss, func(s sample) float64 { return s.step.Seconds() / s.plain.Seconds() }), "x"},
		{"comm_ms", "communication", med(func(s sample) time.Duration { return s.comm }), "ms"},
		{"comm_hidden_ms", "  hidden behind backward", med(func(s sample) time.Duration { return s.hidden }), "ms"},
		{"overlap", "overlap (hidden / communication)", ratio(hidden, comm), "fraction"},
	}
	rows = append(rows, copyRows("", "", res.copied)...)
	if res.viewCopied != (copyBytes{}) || (len(ss) > 0 && ss[0].viewStep > 0) {
		rows = append(rows,
			row{"step_ddp_view_ms", "step with DDP, gradient_as_bucket_view",
				med(func(s sample) time.Duration { return s.viewStep }), "ms"},
			row{"view_step_ratio", "  bucket-view step / copying DDP step",
				median(ss, func(s sample) float64 { return s.viewStep.Seconds() / s.step.Seconds() }), "x"},
			row{"view_step_ratio_no_ddp", "  bucket-view step / step without DDP",
				median(ss, func(s sample) float64 { return s.viewStep.Seconds() / s.plain.Seconds() }), "x"})
		rows = append(rows, copyRows("view_", ", bucket views", res.viewCopied)...)
	}
	for b := range res.plan {
		var sum, hid time.Duration
		for _, s := range ss {
			if b < len(s.buckets) {
				sum += s.buckets[b].done - s.buckets[b].launch
				hid += s.buckets[b].hidden
			}
		}
		at := func(f func(bucketSample) time.Duration) float64 {
			return median(ss, func(s sample) float64 {
				if b >= len(s.buckets) {
					return 0
				}
				return ms(f(s.buckets[b]))
			})
		}
		rows = append(rows,
			row{fmt.Sprintf("bucket%d_launch_ms", b), fmt.Sprintf("bucket %d launched after backward began", b),
				at(func(x bucketSample) time.Duration { return x.launch }), "ms"},
			row{fmt.Sprintf("bucket%d_done_ms", b), fmt.Sprintf("bucket %d done after backward began", b),
				at(func(x bucketSample) time.Duration { return x.done }), "ms"},
			row{fmt.Sprintf("bucket%d_overlap", b), fmt.Sprintf("bucket %d hidden", b), ratio(hid, sum), "fraction"})
	}
	return rows
}

// copyRows are a replica's gradient bytes copied per step.
func copyRows(key, label string, c copyBytes) []row {
	return []row{
		{key + "reducer_copy_in_bytes", "reducer copies into buckets per step" + label, c.reducerIn, "bytes"},
		{key + "reducer_copy_out_bytes", "reducer copies out of buckets per step" + label, c.reducerOut, "bytes"},
		{key + "hook_placed_bytes", "hooks place into bucket views per step" + label, c.placed, "bytes"},
		{key + "copy_total_bytes", "gradient bytes copied per step" + label, c.reducerIn + c.reducerOut + c.placed, "bytes"},
		{key + "fallbacks", "gradients not in their bucket view" + label, float64(c.fallbacks), "count"},
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// median of f over ss; 0 for none.
func median(ss []sample, f func(sample) float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// header describes the run and the bucket plan, as comment lines.
func header(w io.Writer, o options, res rankResult) {
	dims := make([]string, len(o.cfg.sizes))
	for i, s := range o.cfg.sizes {
		dims[i] = fmt.Sprint(s)
	}
	fmt.Fprintf(w, "# ddpstep: MLP %s float32 relu, batch %d per rank, %d ranks, backend %s, hook %s; %d steps after %d "+
		"warmup, medians on rank 0\n",
		strings.Join(dims, "-"), o.cfg.rows, o.nproc, o.backend, o.cfg.hook, o.cfg.steps, o.cfg.warmup)
	fmt.Fprintln(w, "# buckets after the rebuild, in launch order:")
	for b, info := range res.plan {
		fmt.Fprintf(w, "#   %d: %8d bytes: %s\n", b, info.bytes, strings.Join(info.names, " "))
	}
}

// report prints the rows as a table or as CSV.
func report(w io.Writer, o options, res rankResult) {
	header(w, o, res)
	rows := summarize(res)
	if o.format == "csv" {
		fmt.Fprintln(w, "metric,value")
		for _, r := range rows {
			fmt.Fprintf(w, "%s,%.10g\n", r.key, r.value)
		}
		return
	}
	for _, r := range rows {
		switch r.unit {
		case "ms":
			fmt.Fprintf(w, "%-42s %8.2f ms\n", r.label, r.value)
		case "x":
			fmt.Fprintf(w, "%-42s %8.3f\n", r.label, r.value)
		case "bytes":
			fmt.Fprintf(w, "%-42s %8.0f B\n", r.label, r.value)
		case "count":
			fmt.Fprintf(w, "%-42s %8.0f\n", r.label, r.value)
		default:
			fmt.Fprintf(w, "%-42s %8.1f %%\n", r.label, 100*r.value)
		}
	}
}
