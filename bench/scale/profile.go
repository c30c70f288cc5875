package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/internal/cli"
)

// profileSource is where a compute profile comes from.
type profileSource struct {
	profile, timeline, mlp string
	synthetic              string
	skip                   int
}

func (s *profileSource) register(fs *flag.FlagSet) {
	fs.StringVar(&s.profile, "profile", "", "a JSON profile (bench/scale/scalemodel.Profile), as 'scale profile' writes")
	fs.StringVar(&s.timeline, "timeline", "",
		"a ddp-train --timeline directory (rank-0.json is read), best from a --comm-hook noop run")
	fs.StringVar(&s.mlp, "mlp", "", "with --timeline: the MLP's layer widths, input to classes (e.g. 32,1024,1024,4 for "+
		"ddp-train --hidden 1024,1024 on its synthetic data): the parameters' shapes, which PowerSGD needs")
	fs.StringVar(&s.synthetic, "synthetic", "", "a model not at hand: params=N,forward=S,backward=S[,other=S][,rows=R] "+
		"(seconds; float32 gradients ready at a constant rate through backward, DDP's default buckets, R×R matrices for "+
		"PowerSGD)")
	fs.IntVar(&s.skip, "skip", 5, "with --timeline: steps to skip at the start (warm-up, the bucket rebuild)")
}

func (s profileSource) load() (scalemodel.Profile, error) {
	var p scalemodel.Profile
	switch {
	case countSet(s.profile, s.timeline, s.synthetic) > 1:
		return p, errors.New("give one of --profile, --timeline and --synthetic")
	case s.synthetic != "":
		sy, err := parseSynthetic(s.synthetic)
		if err != nil {
			return p, err
		}
		if p, err = scalemodel.SyntheticProfile(sy); err != nil {
			return p, err
		}
	case s.profile != "":
		b, err := os.ReadFile(s.profile)
		if err != nil {
			return p, err
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return p, fmt.Errorf("--profile %s: %w", s.profile, err)
		}
	case s.timeline != "":
		t, err := readTrace(filepath.Join(s.timeline, "rank-0.json"))
		if err != nil {
			return p, err
		}
		shapes, err := mlpShapes(s.mlp)
		if err != nil {
			return p, err
		}
		p, _, err = t.profile(s.skip, shapes)
		if err != nil {
			return p, err
		}
	default:
		return p, errors.New("give --profile FILE, --timeline DIR or --synthetic SPEC")
	}
	return p, p.Validate()
}

func runProfile(args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("scale profile", stderr)
	var src profileSource
	src.register(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	p, err := src.load()
	if err != nil {
		return cli.Usage(err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// mlpShapes are ddp-train's MLP parameters for layer widths w0,w1,...:
// fc1.weight [w0,w1], fc1.bias [w1], fc2.weight [w1,w2], ...
func mlpShapes(s string) ([]scalemodel.Param, error) {
	if s == "" {
		return nil, nil
	}
	w, err := cli.ParseInts(s)
	if err != nil || len(w) < 2 {
		return nil, fmt.Errorf("--mlp %q: want at least two layer widths", s)
	}
	var out []scalemodel.Param
	for i := 1; i < len(w); i++ {
		out = append(out, scalemodel.Param{Rows: w[i-1], Cols: w[i]}, scalemodel.Param{Rows: w[i]})
	}
	return out, nil
}

// event is a Chrome trace event as package timeline writes them.
type event struct {
	Name string           `json:"name"`
	Ph   string           `json:"ph"`
	Ts   float64          `json:"ts"` // µs
	Dur  float64          `json:"dur"`
	Args map[string]int64 `json:"args"`
}

type trace []event

func readTrace(path string) (trace, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, "[") && !strings.HasSuffix(s, "]") { // cut short
		s = strings.TrimSuffix(s, ",") + "]"
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("%s: not a Chrome trace: %w", path, err)
	}
	var t trace
	for _, r := range raw {
		var e event
		if json.Unmarshal(r, &e) == nil && e.Ph == "X" { // metadata events carry string args
			t = append(t, e)
		}
	}
	sort.SliceStable(t, func(i, j int) bool { return t[i].Ts < t[j].Ts })
	return t, nil
}

// stepView is one synchronised step of a trace.
type stepView struct {
	start, fwd, bwd float64 // µs
	wait            float64 // µs Finalize waited for buckets: the exposed communication
	ready           map[int]float64
	bytes           map[int]int64
	bucketOf        map[int]int64 // param -> bucket
}

// steps cuts the trace into its steps, each with the events inside it.
func (t trace) steps() []stepView {
	var out []stepView
	for _, s := range t {
		if s.Name != "step" {
			continue
		}
		v := stepView{start: s.Ts, ready: map[int]float64{}, bytes: map[int]int64{}, bucketOf: map[int]int64{}}
		var bwdStart float64
		for _, e := range t {
			if e.Ts < s.Ts || e.Ts > s.Ts+s.Dur {
				continue
			}
			switch e.Name {
			case "forward":
				v.fwd = e.Dur
			case "backward":
				v.bwd, bwdStart = e.Dur, e.Ts
			case "launch":
				b := int(e.Args["bucket"])
				v.ready[b], v.bytes[b] = e.Ts, e.Args["bytes"]
			case "copy":
				v.bucketOf[int(e.Args["param"])] = e.Args["bucket"]
			case "wait":
				v.wait += e.Dur
			}
		}
		for b := range v.ready {
			v.ready[b] -= bwdStart
		}
		out = append(out, v)
	}
	return out
}

// profile is the median step after skip: forward, backward, each
// bucket's ready time, and other = the median period between step starts
// less forward and backward. period is that median period, in seconds.
func (t trace) profile(skip int, shapes []scalemodel.Param) (p scalemodel.Profile, period float64, err error) {
	st := t.steps()
	if len(st) < skip+3 {
		return p, 0, fmt.Errorf("the trace has %d steps; want at least %d (skip %d)", len(st), skip+3, skip)
	}
	st = st[skip:]
	var fwd, bwd, per []float64
	for i, s := range st {
		fwd, bwd = append(fwd, s.fwd), append(bwd, s.bwd)
		if i > 0 {
			per = append(per, s.start-st[i-1].start)
		}
	}
	last := st[len(st)-1]
	p.Forward, p.Backward, period = median(fwd)/1e6, median(bwd)/1e6, median(per)/1e6
	p.Other = max(period-p.Forward-p.Backward, 0)
	for b := 0; b < len(last.ready); b++ {
		var r []float64
		for _, s := range st {
			r = append(r, s.ready[b])
		}
		bk := scalemodel.Bucket{Ready: median(r) / 1e6, Bytes: float64(last.bytes[b])}
		for i, sh := range shapes {
			if last.bucketOf[i] == int64(b) {
				bk.Params = append(bk.Params, sh)
			}
		}
		p.Buckets = append(p.Buckets, bk)
	}
	return p, period, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// parseSynthetic reads --synthetic's key=value list.
func parseSynthetic(spec string) (scalemodel.Synthetic, error) {
	var sy scalemodel.Synthetic
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return sy, fmt.Errorf("--synthetic: %q is not key=number", kv)
		}
		switch k {
		case "params":
			sy.Params = f
		case "forward":
			sy.Forward = f
		case "backward":
			sy.Backward = f
		case "other":
			sy.Other = f
		case "rows":
			sy.Rows = int(f)
		default:
			return sy, fmt.Errorf("--synthetic: no key %q; want params, forward, backward, other or rows", k)
		}
	}
	return sy, nil
}

// exposed is the median, over the steps after skip, of the time Finalize
// waited for communication ("wait" events): the measured exposed
// communication, in seconds.
func (t trace) exposed(skip int) float64 {
	st := t.steps()
	if len(st) <= skip {
		return 0
	}
	var w []float64
	for _, s := range st[skip:] {
		w = append(w, s.wait)
	}
	return median(w) / 1e6
}
