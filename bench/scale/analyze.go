package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/dataset"
)

// config is one measured configuration.
type config struct {
	rate    string
	perHost int
	hook    string
}

// row is one configuration's figures, in seconds.
type row struct {
	config
	measured       []float64 // each repeat's median step
	exposed        []float64 // each repeat's median wait for communication
	ownExposed     []float64 // each repeat's predicted exposure from its own trace's compute
	pred           scalemodel.Prediction
	withOverhead   float64 // pred.Step plus the hook's overhead; 0 without uncapped runs
	overheadSample int
}

// analyze prints the validation table from DIR/record.json and the
// traces beside it.
//
// The compute profile of each ranks-per-host is the median, field by
// field, of every noop run with that many ranks per host (every repeat
// and rate: noop sends nothing, so the rate does not matter), so that one
// noisy run does not move the predictions. Each other configuration's
// prediction is the model on that profile, the calibrated link and the
// hook. A second prediction adds the hook's overhead: the median, over
// repeats, of what the hook's uncapped run took beyond the model's
// prediction for it (the CPU time of compression, of the hierarchical
// hook's local steps), so that its error is the model's error about the
// capped link alone.
func analyze(dir string, w io.Writer) error {
	b, err := os.ReadFile(filepath.Join(dir, "record.json"))
	if err != nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("%s/record.json: %w", dir, err)
	}
	shapes, err := mlpShapes(fmt.Sprintf("%d,%s,%d", dataset.SyntheticD, rec.Hidden, dataset.SyntheticClasses))
	if err != nil {
		return err
	}
	profiles := map[int][]scalemodel.Profile{}
	measured := map[config][]float64{}
	exposed := map[config][2][]float64{} // measured, predicted from the run's own compute
	var order []config
	for _, r := range rec.Runs {
		t, err := readTrace(filepath.Join(dir, r.Dir, "rank-0.json"))
		if err != nil {
			return err
		}
		p, period, err := t.profile(rec.Skip, shapes)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Dir, err)
		}
		c := config{r.Rate, r.PerHost, r.Hook}
		if r.Hook == "noop" {
			profiles[r.PerHost] = append(profiles[r.PerHost], p)
		}
		if _, seen := measured[c]; !seen {
			order = append(order, c)
		}
		measured[c] = append(measured[c], period)
		e := exposed[c]
		e[0] = append(e[0], t.exposed(rec.Skip))
		e[1] = append(e[1], predictOwn(rec, c, p))
		exposed[c] = e
	}
	rows := predictRows(rec, profiles, measured, order)
	for i := range rows {
		rows[i].exposed, rows[i].ownExposed = exposed[rows[i].config][0], exposed[rows[i].config][1]
	}
	printProfiles(w, rec, profiles)
	printRows(w, rows)
	printSpeedups(w, rows)
	return nil
}

// predictOwn is the model's exposed communication for configuration c
// on the compute (forward, backward, bucket ready times) of the run p
// itself, so that compute noise between runs drops out.
func predictOwn(rec record, c config, p scalemodel.Profile) float64 {
	if c.hook == "noop" {
		return 0
	}
	a, h := modelOf(c.hook)
	return scalemodel.Predict(p, clusterOf(rec, c), a, h).Exposed
}

// clusterOf is the bed as the model sees it for configuration c.
func clusterOf(rec record, c config) scalemodel.Cluster {
	cl := scalemodel.Cluster{
		Hosts: rec.Hosts, RanksPerHost: c.perHost, Inter: rec.Calibration.Inter[c.rate], Intra: rec.Calibration.Intra,
	}
	if strings.HasSuffix(c.hook, shmSuffix) {
		cl.SharedMemory, cl.Intra = true, rec.Calibration.IntraShm
	}
	return cl
}

func predictRows(
	rec record, profiles map[int][]scalemodel.Profile, measured map[config][]float64, order []config,
) []row {
	var rows []row
	byConfig := map[config]*row{}
	for _, c := range order {
		p := medianProfile(profiles[c.perHost])
		a, h := modelOf(c.hook)
		cl := clusterOf(rec, c)
		if c.hook == "noop" {
			h = scalemodel.Hook{Kind: scalemodel.Allreduce}
			cl.Hosts, cl.RanksPerHost = 1, 1 // nothing to send
		}
		rows = append(rows, row{config: c, measured: measured[c], pred: scalemodel.Predict(p, cl, a, h)})
	}
	for i := range rows {
		byConfig[rows[i].config] = &rows[i]
	}
	for i := range rows {
		r := &rows[i]
		base, ok := byConfig[config{"none", r.perHost, r.hook}]
		if !ok || r.rate == "none" {
			continue
		}
		over := median(base.measured) - base.pred.Step
		r.withOverhead, r.overheadSample = r.pred.Step+over, len(base.measured)
	}
	return rows
}

// medianProfile is the field-by-field median of ps (bytes and shapes
// from the first).
func medianProfile(ps []scalemodel.Profile) scalemodel.Profile {
	if len(ps) == 0 {
		return scalemodel.Profile{}
	}
	field := func(f func(scalemodel.Profile) float64) float64 {
		var v []float64
		for _, p := range ps {
			v = append(v, f(p))
		}
		return median(v)
	}
	out := ps[0]
	out.Buckets = slices.Clone(out.Buckets)
	out.Forward = field(func(p scalemodel.Profile) float64 { return p.Forward })
	out.Backward = field(func(p scalemodel.Profile) float64 { return p.Backward })
	out.Other = field(func(p scalemodel.Profile) float64 { return p.Other })
	for i := range out.Buckets {
		out.Buckets[i].Ready = field(func(p scalemodel.Profile) float64 {
			if i < len(p.Buckets) {
				return p.Buckets[i].Ready
			}
			return 0
		})
	}
	return out
}

func printProfiles(w io.Writer, rec record, profiles map[int][]scalemodel.Profile) {
	fmt.Fprintf(w, "\ncalibration: intra-host α %.0f µs, β %.0f MB/s", rec.Calibration.Intra.Latency*1e6,
		rec.Calibration.Intra.Bandwidth/1e6)
	if l := rec.Calibration.IntraShm; l.Bandwidth > 0 {
		fmt.Fprintf(w, "; intra-host shared memory α %.0f µs, β %.0f MB/s", l.Latency*1e6, l.Bandwidth/1e6)
	}
	for _, r := range slices.Sorted(mapKeys(rec.Calibration.Inter)) {
		l := rec.Calibration.Inter[r]
		fmt.Fprintf(w, "; %s α %.0f µs, β %.1f MB/s", r, l.Latency*1e6, l.Bandwidth/1e6)
	}
	fmt.Fprintln(w)
	for _, k := range slices.Sorted(mapKeys(profiles)) {
		p := medianProfile(profiles[k])
		var lo, hi float64 = 1e9, 0
		for _, q := range profiles[k] {
			lo, hi = min(lo, q.Compute()), max(hi, q.Compute())
		}
		fmt.Fprintf(w, "compute-only (noop), %d×%d ranks, median of %d runs: forward %.1f ms, backward %.1f ms, other %.1f "+
			"ms; step %.1f ms (runs %.1f–%.1f); buckets",
			rec.Hosts, k, len(profiles[k]), p.Forward*1e3, p.Backward*1e3, p.Other*1e3, p.Compute()*1e3, lo*1e3, hi*1e3)
		for _, b := range p.Buckets {
			fmt.Fprintf(w, " [%.0f B ready at %.1f ms]", b.Bytes, b.Ready*1e3)
		}
		fmt.Fprintln(w)
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func printRows(w io.Writer, rows []row) {
	fmt.Fprintf(w, "\n| link | ranks | hook | measured ms: median (min–max) | predicted ms | error | + hook overhead ms "+
		"| error | exposed ms: measured | predicted, own compute | comm ms | hidden |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.hook == "noop" {
			continue
		}
		m := median(r.measured)
		lo, hi := minMax(r.measured)
		over, overErr := "–", "–"
		if r.withOverhead > 0 {
			over, overErr = fmt.Sprintf("%.1f", r.withOverhead*1e3), fmt.Sprintf("%+.0f%%", (r.withOverhead/m-1)*100)
		}
		fmt.Fprintf(w, "| %s | 2×%d | %s | %.1f (%.1f–%.1f) | %.1f | %+.0f%% | %s | %s | %.1f | %.1f | %.1f | %.0f%% |\n",
			r.rate, r.perHost, r.hook,
			m*1e3, lo*1e3, hi*1e3, r.pred.Step*1e3, (r.pred.Step/m-1)*100, over, overErr,
			median(r.exposed)*1e3, median(r.ownExposed)*1e3, r.pred.Comm*1e3, r.pred.Hidden*100)
	}
}

func printSpeedups(w io.Writer, rows []row) {
	by := map[config]row{}
	for _, r := range rows {
		by[r.config] = r
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nspeedup over allreduce\tlink\tranks\tmeasured\tpredicted\n")
	for _, r := range rows {
		base, ok := by[config{r.rate, r.perHost, "allreduce"}]
		if !ok || r.hook == "allreduce" || r.hook == "noop" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t2×%d\t%.2f×\t%.2f×\n", r.hook, r.rate, r.perHost,
			median(base.measured)/median(r.measured), base.pred.Step/r.pred.Step)
	}
	_ = tw.Flush()
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}
