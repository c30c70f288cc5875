package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// event is one Chrome trace event, as timeline writes them.
type event struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Args map[string]any `json:"args"`
}

func (e event) end() float64 { return e.Ts + e.Dur }

type lane struct{ pid, tid int }

// trace is the events of one or more files, with their lanes' names.
type trace struct {
	paths  []string
	events []event
	names  map[lane]string
}

func readTraces(paths []string) (*trace, error) {
	t := &trace{paths: paths, names: map[lane]string{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		s := strings.TrimSpace(string(b))
		if strings.HasPrefix(s, "[") && !strings.HasSuffix(s, "]") { // a trace cut short by a crash
			s = strings.TrimSuffix(s, ",") + "]"
		}
		var evs []event
		if err := json.Unmarshal([]byte(s), &evs); err != nil {
			return nil, fmt.Errorf("%s: not a Chrome trace (JSON array of events): %w", p, err)
		}
		for _, e := range evs {
			switch {
			case e.Ph == "X":
				t.events = append(t.events, e)
			case e.Ph == "M" && e.Name == "thread_name":
				if n, ok := e.Args["name"].(string); ok {
					t.names[lane{e.Pid, e.Tid}] = n
				}
			}
		}
	}
	if len(t.events) == 0 {
		return nil, fmt.Errorf("no complete events in %s", strings.Join(paths, ", "))
	}
	return t, nil
}

// window is the span of the last n "step" events of the lowest rank, or
// of everything when there are no steps; shown is how many steps it
// holds (0 when there are none).
func (t *trace) window(n int) (from, to float64, shown int) {
	var steps []event
	for _, e := range t.events {
		if e.Name == "step" {
			steps = append(steps, e)
		}
	}
	if len(steps) == 0 {
		from, to = math.Inf(1), math.Inf(-1)
		for _, e := range t.events {
			from, to = min(from, e.Ts), max(to, e.end())
		}
		return from, to, 0
	}
	low := slices.MinFunc(steps, func(a, b event) int { return cmp.Compare(a.Pid, b.Pid) }).Pid
	steps = slices.DeleteFunc(steps, func(e event) bool { return e.Pid != low })
	slices.SortFunc(steps, func(a, b event) int { return cmp.Compare(a.Ts, b.Ts) })
	first := max(len(steps)-n, 0)
	return steps[first].Ts, steps[len(steps)-1].end(), len(steps) - first
}

// colorOf gives the reducer's events fixed colours, others a hashed one.
func colorOf(name string) color.RGBA {
	switch name {
	case "step":
		return color.RGBA{225, 225, 225, 255}
	case "forward":
		return color.RGBA{66, 133, 244, 255}
	case "backward":
		return color.RGBA{52, 168, 83, 255}
	case "copy":
		return color.RGBA{120, 120, 120, 255}
	case "launch":
		return color.RGBA{251, 140, 0, 255}
	case "communication":
		return color.RGBA{142, 68, 173, 255}
	case "wait":
		return color.RGBA{219, 68, 55, 255}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return color.RGBA{uint8(v), uint8(v >> 8), uint8(v >> 16), 255}
}

// Size of the timeline chart: its width, the height of one lane, and
// what the title, the time axis and the margins take.
const (
	traceW    = 13 * vg.Inch
	laneH     = 0.32 * vg.Inch
	traceRest = 1.3 * vg.Inch
	barFrac   = 0.64 // a bar's share of its lane's height
)

// legendOrder is the reducer's events in the order a step runs them;
// other names follow, sorted.
var legendOrder = []string{"step", "forward", "backward", "copy", "launch", "communication", "wait"}

// bar is one event drawn in the window: from x0 to x1 ms, in row row
// (0 at the top).
type bar struct {
	x0, x1 float64
	row    int
	color  color.Color
}

// gantt draws the lanes: a shaded band for every other lane, then the
// events as bars. Rows run from the top: row r is at y = rows-1-r.
type gantt struct {
	bars []bar
	rows int
	span float64 // ms
}

func (g *gantt) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, g.span, -0.5, float64(g.rows) - 0.5
}

func (g *gantt) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	rect := func(x0, x1, yc, h float64, col color.Color) {
		r := vg.Rectangle{Min: vg.Point{X: x(x0), Y: y(yc - h/2)}, Max: vg.Point{X: x(x1), Y: y(yc + h/2)}}
		if r.Max.X-r.Min.X < 0.75 { // a point at 96 dpi: the shortest events stay visible
			r.Max.X = r.Min.X + 0.75
		}
		c.SetColor(col)
		c.Fill(r.Path())
	}
	for r := 0; r < g.rows; r += 2 {
		rect(0, g.span, float64(g.rows-1-r), 1, color.RGBA{246, 246, 246, 255})
	}
	for _, b := range g.bars {
		rect(b.x0, b.x1, float64(g.rows-1-b.row), barFrac, b.color)
	}
}

// plotTrace draws the lanes of the window as a Gantt chart: one row per
// lane of each rank, time in ms from the window's start, a legend of
// the events' colours. An empty title is traceTitle's.
func plotTrace(t *trace, steps int, title string) *chart {
	from, to, shown := t.window(steps)
	if title == "" {
		title = traceTitle(t.paths, shown)
	}
	lanes, names := t.visible(from, to)
	row := map[lane]int{}
	labels := make([]string, len(lanes))
	for i, l := range lanes {
		row[l] = i
		name := t.names[l]
		if name == "" {
			name = fmt.Sprintf("lane %d", l.tid)
		}
		labels[len(lanes)-1-i] = fmt.Sprintf("rank %d %s", l.pid, name) // NominalY counts from the bottom
	}
	g := &gantt{rows: len(lanes), span: max((to-from)/1000, 1e-3)}
	for _, e := range t.events {
		if r, ok := row[lane{e.Pid, e.Tid}]; ok && e.end() >= from && e.Ts <= to {
			g.bars = append(g.bars, bar{(max(e.Ts, from) - from) / 1000, (min(e.end(), to) - from) / 1000, r, colorOf(e.Name)})
		}
	}
	c := newChart(title, traceW, max(vg.Length(len(lanes))*laneH, vg.Length(len(names))*0.25*vg.Inch)+traceRest)
	c.p.Add(g)
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	c.p.Add(grid)
	c.p.NominalY(labels...)
	c.p.X.Label.Text = "time from the window's start (ms)"
	c.p.X.Min, c.p.X.Max = 0, g.span
	c.p.X.Tick.Marker = niceTicks(10)
	for _, n := range names {
		c.legend.Add(n, swatch{colorOf(n)})
	}
	return c
}

// visible returns the lanes with an event in [from, to], by rank and
// lane, and the names of those events, in legendOrder.
func (t *trace) visible(from, to float64) ([]lane, []string) {
	var lanes []lane
	var names []string
	for _, e := range t.events {
		if e.end() < from || e.Ts > to {
			continue
		}
		if l := (lane{e.Pid, e.Tid}); !slices.Contains(lanes, l) {
			lanes = append(lanes, l)
		}
		if !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	slices.SortFunc(lanes, func(a, b lane) int { return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid)) })
	rank := func(n string) int {
		if i := slices.Index(legendOrder, n); i >= 0 {
			return i
		}
		return len(legendOrder)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b)) })
	return lanes, names
}

// traceTitle names the inputs and the window: "timeline: rank-0.json,
// rank-1.json (last 3 steps)", steps being how many the window holds (0:
// the trace has none). Many ranks are shortened to the first and the
// last.
func traceTitle(paths []string, steps int) string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	list := strings.Join(names, ", ")
	if len(names) > 4 {
		list = fmt.Sprintf("%s … %s (%d ranks)", names[0], names[len(names)-1], len(names))
	}
	switch {
	case steps == 0:
		return fmt.Sprintf("timeline: %s (all events)", list)
	case steps == 1:
		return fmt.Sprintf("timeline: %s (last step)", list)
	}
	return fmt.Sprintf("timeline: %s (last %d steps)", list, steps)
}

// formatTick prints v with at most three decimals and no trailing
// zeros.
func formatTick(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-0" {
		return "0"
	}
	return s
}
