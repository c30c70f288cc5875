package main

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/internal/cli"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// table is a benchmark CSV: a header and rows, '#' lines skipped.
type table struct {
	header []string
	rows   [][]string
}

func readTable(r io.Reader) (*table, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			kept = append(kept, line)
		}
	}
	recs, err := csv.NewReader(strings.NewReader(strings.Join(kept, "\n"))).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) < 2 || len(recs[0]) < 2 {
		return nil, fmt.Errorf("want a header and at least one row of two columns or more")
	}
	return &table{header: recs[0], rows: recs[1:]}, nil
}

// column returns column j as numbers, or false if one is not a number.
func (t *table) column(j int) ([]float64, bool) {
	out := make([]float64, len(t.rows))
	for i, r := range t.rows {
		v, err := strconv.ParseFloat(strings.TrimSpace(r[j]), 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// yColumn finds the column named y, or the last column when y is empty.
func (t *table) yColumn(y string) (int, error) {
	if y == "" {
		return len(t.header) - 1, nil
	}
	if j := slices.Index(t.header, y); j > 0 {
		return j, nil
	}
	return 0, cli.Usage(fmt.Errorf("--y %q: not one of the columns %v", y, t.header[1:]))
}

// Sizes of the CSV charts: the line chart's, and the bar chart's width,
// height per bar and the rest (title, axis, margins).
const (
	lineW, lineH = 10 * vg.Inch, 6 * vg.Inch
	barW         = 10 * vg.Inch
	barRowH      = 0.4 * vg.Inch
	barRest      = 1.4 * vg.Inch
	maxXTicks    = 10
)

// palette colours the series of a line chart, and the bars.
var palette = []color.RGBA{
	{66, 133, 244, 255}, {219, 68, 55, 255}, {52, 168, 83, 255}, {251, 140, 0, 255},
	{142, 68, 173, 255}, {0, 172, 193, 255}, {120, 120, 120, 255}, {233, 30, 99, 255},
}

// series is one line of a line chart.
type series struct {
	name string
	xys  plotter.XYs
}

// plotTable draws a line chart when the first column is numeric (x
// against y), and a horizontal bar chart of y per row otherwise. An
// empty title is "NAME: Y COLUMN".
func plotTable(t *table, y, name, title string) (*chart, error) {
	j, err := t.yColumn(y)
	if err != nil {
		return nil, err
	}
	ys, ok := t.column(j)
	if !ok {
		return nil, fmt.Errorf("column %q is not numeric", t.header[j])
	}
	if title == "" {
		title = name + ": " + t.header[j]
	}
	if xs, ok := t.column(0); ok {
		return lineChart(t.series(xs, ys), t.header[0], t.header[j], title)
	}
	labels := make([]string, len(t.rows))
	for i, r := range t.rows {
		labels[i] = r[0]
	}
	return barChart(labels, ys, t.header[j], title)
}

// series splits the points by the "op" column (bench/allreduce --op all
// prints every collective in one CSV), one series per op in the order
// they first appear; without it, all the points are one series.
func (t *table) series(xs, ys []float64) []series {
	op := slices.Index(t.header, "op")
	var out []series
	for i := range xs {
		name := ""
		if op >= 0 {
			name = t.rows[i][op]
		}
		k := slices.IndexFunc(out, func(s series) bool { return s.name == name })
		if k < 0 {
			out = append(out, series{name: name})
			k = len(out) - 1
		}
		out[k].xys = append(out[k].xys, plotter.XY{X: xs[i], Y: ys[i]})
	}
	for _, s := range out {
		slices.SortStableFunc(s.xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	}
	return out
}

// lineChart draws each series as a line with its points marked, x on a
// log scale when it spans two orders of magnitude (byte sizes), labelled
// at the data's x values.
func lineChart(ss []series, xName, yName, title string) (*chart, error) {
	c := newChart(title, lineW, lineH)
	var xs []float64
	for k, s := range ss {
		col := palette[k%len(palette)]
		l, pts, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return nil, err
		}
		l.LineStyle.Color, l.LineStyle.Width = col, vg.Points(2)
		pts.GlyphStyle.Color, pts.GlyphStyle.Shape, pts.GlyphStyle.Radius = col, draw.CircleGlyph{}, vg.Points(4)
		c.p.Add(l, pts)
		name := s.name
		if name == "" {
			name = unitLabel(yName)
		}
		c.legend.Add(name, l, pts)
		for _, xy := range s.xys {
			if !slices.Contains(xs, xy.X) {
				xs = append(xs, xy.X)
			}
		}
	}
	slices.Sort(xs)
	grid := plotter.NewGrid()
	c.p.Add(grid)
	c.p.X.Label.Text, c.p.Y.Label.Text = unitLabel(xName), unitLabel(yName)
	c.p.Y.Min = min(c.p.Y.Min, 0)
	c.p.Y.Tick.Marker = niceTicks(8)
	if xs[0] > 0 && xs[len(xs)-1]/xs[0] >= 100 {
		c.p.X.Scale = plot.LogScale{}
		c.p.X.Label.Text += ", log scale"
		c.p.X.Tick.Marker = xTicks(xs, strings.Contains(strings.ToLower(xName), "bytes"))
	}
	return c, nil
}

// xTicks labels at most maxXTicks of the data's x values, evenly picked,
// the largest always: 4K, 1M, 64M for byte sizes.
func xTicks(xs []float64, bytes bool) plot.ConstantTicks {
	step := (len(xs) + maxXTicks - 1) / maxXTicks
	var ticks plot.ConstantTicks
	for i := len(xs) - 1; i >= 0; i -= step {
		label := formatTick(xs[i])
		if bytes {
			label = humanBytes(xs[i])
		}
		ticks = append(ticks, plot.Tick{Value: xs[i], Label: label})
	}
	slices.Reverse(ticks)
	return ticks
}

// barChart draws one horizontal bar per row, first row at the top, its
// value printed at its end.
func barChart(labels []string, vs []float64, yName, title string) (*chart, error) {
	n := len(vs)
	rev := make(plotter.Values, n) // NominalY counts from the bottom
	names := make([]string, n)
	xys := make(plotter.XYs, n)
	texts := make([]string, n)
	for i := range vs {
		k := n - 1 - i
		rev[k], names[k] = vs[i], labels[i]
		xys[k] = plotter.XY{X: vs[i], Y: float64(k)}
		texts[k] = strconv.FormatFloat(vs[i], 'g', 4, 64)
	}
	c := newChart(title, barW, vg.Length(n)*barRowH+barRest)
	bars, err := plotter.NewBarChart(rev, barRowH*0.55)
	if err != nil {
		return nil, err
	}
	bars.Horizontal, bars.Color, bars.LineStyle.Width = true, palette[0], 0
	values, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return nil, err
	}
	for i := range values.TextStyle {
		values.TextStyle[i].Font.Variant = "Sans"
		values.TextStyle[i].YAlign = draw.YCenter
	}
	values.Offset = vg.Point{X: vg.Points(4)}
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	c.p.Add(grid, bars, values)
	c.p.NominalY(names...)
	c.p.X.Label.Text = unitLabel(yName)
	c.p.X.Min = min(c.p.X.Min, 0)
	c.p.X.Max *= 1.12 // room for the value printed after the longest bar
	c.p.X.Tick.Marker = niceTicks(8)
	c.legend.Add(unitLabel(yName), bars)
	return c, nil
}

// humanBytes prints a byte count as 4K, 1M, 64M.
func humanBytes(v float64) string {
	for _, u := range []struct {
		s string
		n float64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if v >= u.n {
			return formatTick(v/u.n) + u.s
		}
	}
	return formatTick(v)
}
