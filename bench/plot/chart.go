package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/goddp/ddp/internal/cli"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chart is a plot and its legend, drawn side by side: the legend gets a
// column of its own on the right, so it never hides data, however many
// lanes or series there are.
type chart struct {
	p      *plot.Plot
	legend plot.Legend
	w, h   vg.Length
}

// newChart is a plot with the title, Liberation Sans throughout (the
// plot package's default is a serif face, harder to read at tick size),
// and an empty legend.
func newChart(title string, w, h vg.Length) *chart {
	c := &chart{p: plot.New(), legend: plot.NewLegend(), w: w, h: h}
	c.p.Title.Text = title
	c.p.Title.Padding = vg.Points(8)
	for _, f := range []*font.Font{
		&c.p.Title.TextStyle.Font, &c.legend.TextStyle.Font,
		&c.p.X.Label.TextStyle.Font, &c.p.X.Tick.Label.Font,
		&c.p.Y.Label.TextStyle.Font, &c.p.Y.Tick.Label.Font,
	} {
		f.Variant = "Sans"
	}
	c.p.Title.TextStyle.Font.Size = vg.Points(14)
	c.legend.Top, c.legend.Left = true, true
	c.legend.Padding = vg.Points(4)
	c.legend.ThumbnailWidth = vg.Points(14)
	return c
}

// formatOf is the image format -out asks for, by its extension.
func formatOf(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg":
		return ext[1:], nil
	}
	return "", cli.Usage(fmt.Errorf("--out %q: want a .png or .svg file", path))
}

// save draws the chart into path, as PNG or SVG by its extension.
func (c *chart) save(path string) error {
	format, err := formatOf(path)
	if err != nil {
		return err
	}
	cv, err := draw.NewFormattedCanvas(c.w, c.h, format)
	if err != nil {
		return err
	}
	dc := draw.New(cv)
	dc.SetColor(color.White) // the SVG's background too, not only the plot's
	dc.Fill(dc.Rectangle.Path())
	pad := vg.Points(10)
	lw := c.legend.Rectangle(dc).Size().X + 2*pad
	c.p.Draw(draw.Crop(dc, pad, -lw, pad, -pad))
	top := c.p.Title.TextStyle.Rectangle(c.p.Title.Text).Size().Y + c.p.Title.Padding + 2*pad
	c.legend.Draw(draw.Crop(dc, dc.Size().X-lw+pad, -pad, pad, -top))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := cv.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// swatch is a legend entry's thumbnail: a filled square of one colour.
type swatch struct{ color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	side := min(c.Size().X, c.Size().Y)
	r := vg.Rectangle{Min: c.Min, Max: vg.Point{X: c.Min.X + side, Y: c.Min.Y + side}}
	c.SetColor(s.Color)
	c.Fill(r.Path())
}

// unitLabel turns a benchmark column name into an axis label with its
// unit: busbw_GBps is "busbw (GB/s)", time_us "time (µs)", bytes
// "size (bytes)". A name without a known unit suffix stays as it is.
func unitLabel(col string) string {
	units := map[string]string{
		"ns": "ns", "us": "µs", "ms": "ms", "s": "s", "seconds": "s",
		"GBps": "GB/s", "MBps": "MB/s", "Gbps": "Gb/s", "bytes": "bytes", "pct": "%",
	}
	if col == "bytes" {
		return "size (bytes)"
	}
	if i := strings.LastIndex(col, "_"); i > 0 {
		if u, ok := units[col[i+1:]]; ok {
			return strings.ReplaceAll(col[:i], "_", " ") + " (" + u + ")"
		}
	}
	return strings.ReplaceAll(col, "_", " ")
}

// niceTicks labels about n ticks at 1, 2 or 5 times a power of ten
// apart; the plot package's default gives three or four, too few to read
// a time or a bandwidth off the chart.
func niceTicks(n int) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		step := niceStep((hi - lo) / float64(n))
		var ticks []plot.Tick
		for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
			ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v)})
		}
		return ticks
	})
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
