package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
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
	return 0, fmt.Errorf("-y %q: not one of the columns %v", y, t.header[1:])
}

// Layout of the CSV plots, in pixels.
const (
	chartW, chartH = 1200, 700
	padL, padR     = 110, 40
	padT, padB     = 60, 80
	barRowH        = 28
)

var seriesColor = color.RGBA{66, 133, 244, 255}

// plotTable draws a line chart when the first column is numeric (x
// against y), and a horizontal bar chart of y per row otherwise.
func plotTable(t *table, y, title string) (*canvas, error) {
	j, err := t.yColumn(y)
	if err != nil {
		return nil, err
	}
	ys, ok := t.column(j)
	if !ok {
		return nil, fmt.Errorf("column %q is not numeric", t.header[j])
	}
	if xs, ok := t.column(0); ok {
		return lineChart(xs, ys, t.header[0], t.header[j], title), nil
	}
	labels := make([]string, len(t.rows))
	for i, r := range t.rows {
		labels[i] = r[0]
	}
	return barChart(labels, ys, t.header[j], title), nil
}

func lineChart(xs, ys []float64, xName, yName, title string) *canvas {
	c := newCanvas(chartW, chartH)
	c.text(10, 10, title, 2, black)
	logX := slices.Min(xs) > 0 && slices.Max(xs)/slices.Min(xs) >= 100
	tx := func(v float64) float64 {
		if logX {
			return math.Log2(v)
		}
		return v
	}
	x0, x1 := tx(slices.Min(xs)), tx(slices.Max(xs))
	if x1 == x0 {
		x1 = x0 + 1
	}
	ymax := max(slices.Max(ys), 0) * 1.1
	if ymax == 0 {
		ymax = 1
	}
	pw, ph := chartW-padL-padR, chartH-padT-padB
	px := func(v float64) int { return padL + int(math.Round((tx(v)-x0)/(x1-x0)*float64(pw))) }
	py := func(v float64) int { return padT + ph - int(math.Round(v/ymax*float64(ph))) }
	step := niceStep(ymax / 8)
	for v := 0.0; v <= ymax; v += step {
		c.fill(padL, py(v), padL+pw, py(v)+1, grey)
		c.text(padL-8-textWidth(formatTick(v)), py(v)-3, formatTick(v), 1, dark)
	}
	c.fill(padL, padT+ph, padL+pw, padT+ph+1, black)
	c.fill(padL, padT, padL+1, padT+ph, black)
	for _, v := range xs {
		c.fill(px(v), padT+ph, px(v)+1, padT+ph+5, black)
		label := formatTick(v)
		if logX {
			label = humanBytes(v)
		}
		c.text(px(v)-textWidth(label)/2, padT+ph+10, label, 1, dark)
	}
	for i := range xs {
		if i > 0 {
			c.line(px(xs[i-1]), py(ys[i-1]), px(xs[i]), py(ys[i]), 2, seriesColor)
		}
		c.fill(px(xs[i])-3, py(ys[i])-3, px(xs[i])+4, py(ys[i])+4, seriesColor)
	}
	xl := xName
	if logX {
		xl += " (log scale)"
	}
	c.text(padL+pw/2-textWidth(xl), chartH-padB+40, xl, 2, black)
	c.text(10, padT-20, yName, 2, black)
	return c
}

func barChart(labels []string, vs []float64, yName, title string) *canvas {
	h := padT + len(labels)*barRowH + padB
	c := newCanvas(chartW, h)
	c.text(10, 10, title, 2, black)
	left := 20
	for _, l := range labels {
		left = max(left, textWidth(l)+20)
	}
	vmax := max(slices.Max(vs), 0)
	if vmax == 0 {
		vmax = 1
	}
	pw := chartW - left - padR - 80
	for i, l := range labels {
		y := padT + i*barRowH
		c.text(10, y+(barRowH-glyphH)/2, l, 1, black)
		w := int(math.Round(max(vs[i], 0) / vmax * float64(pw)))
		c.fill(left, y+4, left+max(w, 1), y+barRowH-4, seriesColor)
		c.text(left+w+6, y+(barRowH-glyphH)/2, strconv.FormatFloat(vs[i], 'g', 4, 64), 1, dark)
	}
	c.fill(left, padT, left+1, padT+len(labels)*barRowH, black)
	c.text(left, h-padB+30, yName, 2, black)
	return c
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
