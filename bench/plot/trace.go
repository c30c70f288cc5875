package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"slices"
	"strings"
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
	events []event
	names  map[lane]string
}

func readTraces(paths []string) (*trace, error) {
	t := &trace{names: map[lane]string{}}
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
// of everything when there are no steps.
func (t *trace) window(n int) (from, to float64) {
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
		return from, to
	}
	low := slices.MinFunc(steps, func(a, b event) int { return cmp.Compare(a.Pid, b.Pid) }).Pid
	steps = slices.DeleteFunc(steps, func(e event) bool { return e.Pid != low })
	slices.SortFunc(steps, func(a, b event) int { return cmp.Compare(a.Ts, b.Ts) })
	first := steps[max(len(steps)-n, 0)]
	return first.Ts, steps[len(steps)-1].end()
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

// Layout of the trace plot, in pixels.
const (
	traceW     = 1600
	labelW     = 190
	rowH       = 22
	barH       = 14
	traceTop   = 40
	axisH      = 40
	legendH    = 30
	tracePadR  = 20
	tickTarget = 10
)

// plotTrace draws the lanes of the window as a Gantt chart.
func plotTrace(t *trace, steps int, title string) *canvas {
	from, to := t.window(steps)
	var lanes []lane
	seen := map[lane]bool{}
	var names []string
	for _, e := range t.events {
		if e.end() < from || e.Ts > to {
			continue
		}
		l := lane{e.Pid, e.Tid}
		if !seen[l] {
			seen[l] = true
			lanes = append(lanes, l)
		}
		if !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	slices.SortFunc(lanes, func(a, b lane) int { return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid)) })
	row := map[lane]int{}
	for i, l := range lanes {
		row[l] = i
	}
	h := traceTop + len(lanes)*rowH + axisH + legendH
	c := newCanvas(traceW, h)
	c.text(10, 10, title, 2, black)
	plotW := traceW - labelW - tracePadR
	x := func(ts float64) int { return labelW + int(math.Round((ts-from)/(to-from)*float64(plotW))) }
	for i, l := range lanes {
		y := traceTop + i*rowH
		if i%2 == 0 {
			c.fill(labelW, y, traceW-tracePadR, y+rowH, color.RGBA{248, 248, 248, 255})
		}
		name := t.names[l]
		if name == "" {
			name = fmt.Sprintf("lane %d", l.tid)
		}
		c.text(8, y+(rowH-glyphH)/2, fmt.Sprintf("rank %d %s", l.pid, name), 1, black)
	}
	for _, e := range t.events {
		r, ok := row[lane{e.Pid, e.Tid}]
		if !ok || e.end() < from || e.Ts > to {
			continue
		}
		y := traceTop + r*rowH + (rowH-barH)/2
		x0, x1 := x(max(e.Ts, from)), x(min(e.end(), to))
		c.fill(x0, y, max(x1, x0+1), y+barH, colorOf(e.Name))
	}
	axisY := traceTop + len(lanes)*rowH
	c.fill(labelW, axisY, traceW-tracePadR, axisY+1, black)
	span := (to - from) / 1000 // ms
	step := niceStep(span / tickTarget)
	for v := 0.0; v <= span+1e-9; v += step {
		px := x(from + v*1000)
		c.fill(px, axisY, px+1, axisY+5, black)
		c.text(px-textWidth(formatTick(v))/2, axisY+8, formatTick(v), 1, dark)
	}
	c.text(traceW-tracePadR-textWidth("ms"), axisY+22, "ms", 1, dark)
	lx := labelW
	for _, n := range names {
		c.fill(lx, h-legendH+6, lx+14, h-legendH+20, colorOf(n))
		c.text(lx+18, h-legendH+9, n, 1, black)
		lx += 18 + textWidth(n) + 16
	}
	return c
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func formatTick(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-0" {
		return "0"
	}
	return s
}
