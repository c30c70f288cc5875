package main

import (
	"encoding/xml"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/timeline"
)

// testdata holds two ranks' traces of three steps (rank-0.json and
// rank-1.json, as writeTrace writes them with the timeline package), a
// CSV as bench/allreduce --op allreduce,broadcast prints it, and one as
// bench/ddpstep --format csv prints it.
var traces = []string{"testdata/rank-0.json", "testdata/rank-1.json"}

// decodePNG decodes the PNG at path and checks that its size is sane: at
// least w×h pixels, at most 4000×4000.
func decodePNG(t *testing.T, path string, w, h int) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < w || b.Dy() < h || b.Dx() > 4000 || b.Dy() > 4000 {
		t.Errorf("%s is %dx%d pixels, want at least %dx%d and at most 4000x4000", path, b.Dx(), b.Dy(), w, h)
	}
	return img
}

// count is the number of pixels of colour c in img.
func count(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				n++
			}
		}
	}
	return n
}

// svgTexts parses the SVG at path as XML and returns its text, each
// <text> element's content.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	var texts []string
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "svg" && len(texts) == 0 && !inText {
				texts = append(texts, "<svg>")
			}
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		}
	}
	if len(texts) == 0 || texts[0] != "<svg>" {
		t.Fatalf("%s has no <svg> root", path)
	}
	return texts[1:]
}

// hasAll reports the wanted texts that texts lacks.
func missing(texts []string, want ...string) []string {
	var out []string
	for _, w := range want {
		found := false
		for _, s := range texts {
			found = found || s == w
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}

// writeTrace writes two ranks' traces of three steps, as the reducer does.
func writeTrace(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }
	for rank := range 2 {
		p := filepath.Join(dir, "rank-"+string(rune('0'+rank))+".json")
		w, err := timeline.Create(p, rank)
		if err != nil {
			t.Fatal(err)
		}
		for s := range 3 {
			b := float64(10 * s)
			w.Write(&timeline.Event{Name: "step", Lane: timeline.LaneStep, Start: ms(b), End: ms(b + 9)})
			w.Write(&timeline.Event{Name: "forward", Lane: timeline.LaneCompute, Start: ms(b), End: ms(b + 3)})
			w.Write(&timeline.Event{Name: "backward", Lane: timeline.LaneCompute, Start: ms(b + 3), End: ms(b + 7)})
			w.Write(&timeline.Event{Name: "launch", Lane: timeline.LaneReducer, Start: ms(b + 4), End: ms(b + 4.2)})
			w.Write(&timeline.Event{Name: "communication", Lane: timeline.LaneBucket, Start: ms(b + 4.2), End: ms(b + 8)})
			w.Write(&timeline.Event{Name: "wait", Lane: timeline.LaneReducer, Start: ms(b + 7), End: ms(b + 8)})
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// The testdata traces are what writeTrace writes today: the timeline
// package's format has not drifted from the one plot reads.
func TestTestdataTraces(t *testing.T) {
	for i, p := range writeTrace(t, t.TempDir()) {
		got, err1 := os.ReadFile(p)
		want, err2 := os.ReadFile(traces[i])
		if err1 != nil || err2 != nil || string(got) != string(want) {
			t.Errorf("%s differs from what timeline writes now (%v, %v); regenerate it with writeTrace", traces[i], err1, err2)
		}
	}
}

func TestTraceToPNG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.png")
	if err := run([]string{"--in", strings.Join(traces, ","), "--out", out, "--steps", "2"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, out, 1000, 300)
	for _, name := range []string{"forward", "backward", "launch", "communication", "wait", "step"} {
		if n := count(img, colorOf(name)); n < 50 {
			t.Errorf("%d pixels of %s's colour; its bars are missing", n, name)
		}
	}
}

// The SVG has the title naming both ranks' files, the time axis's label
// with its unit, every lane, and a legend entry for every event.
func TestTraceToSVG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.svg")
	if err := run([]string{"--in", strings.Join(traces, ","), "--out", out, "--steps", "2"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, out)
	if m := missing(texts, "timeline: rank-0.json, rank-1.json (last 2 steps)", "time from the window's start (ms)",
		"rank 0 step", "rank 1 compute", "rank 1 reducer",
		"step", "forward", "backward", "launch", "communication", "wait"); len(m) > 0 {
		t.Errorf("the SVG lacks %q; its texts are %q", m, texts)
	}
}

func TestTraceTitle(t *testing.T) {
	for _, c := range []struct {
		paths []string
		steps int
		want  string
	}{
		{[]string{"trace/rank-0.json", "trace/rank-1.json"}, 3, "timeline: rank-0.json, rank-1.json (last 3 steps)"},
		{[]string{"rank-0.json"}, 1, "timeline: rank-0.json (last step)"},
		{[]string{"x.json"}, 0, "timeline: x.json (all events)"},
		{[]string{"r0.json", "r1.json", "r2.json", "r3.json", "r4.json"}, 2,
			"timeline: r0.json … r4.json (5 ranks) (last 2 steps)"},
	} {
		if got := traceTitle(c.paths, c.steps); got != c.want {
			t.Errorf("traceTitle(%q, %d) = %q, want %q", c.paths, c.steps, got, c.want)
		}
	}
}

// A trace cut short by a crash (no closing bracket) still plots.
func TestTruncatedTrace(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(traces[0])
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.json")
	if err := os.WriteFile(cut, b[:len(b)-3], 0o644); err != nil { // drops "\n]\n"
		t.Fatal(err)
	}
	if err := run([]string{"--in", cut}, io.Discard); err != nil {
		t.Fatal(err)
	}
	decodePNG(t, filepath.Join(dir, "cut.png"), 1000, 200)
}

// allreduce.csv: a numeric first column, byte sizes: a line per op on a
// log scale, labelled with units. ddpstep.csv: names, a bar chart.
func TestCSV(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		in, y string
		want  []string
	}{
		{"allreduce.csv", "busbw_GBps", []string{"allreduce.csv: busbw_GBps", "size (bytes), log scale", "busbw (GB/s)",
			"allreduce", "broadcast", "4K", "1M", "64M"}},
		{"ddpstep.csv", "", []string{"ddpstep.csv: value", "step_ms", "comm_ms", "12.5"}},
	} {
		base := filepath.Join(dir, strings.TrimSuffix(c.in, ".csv"))
		for _, ext := range []string{".png", ".svg"} {
			args := []string{"--in", filepath.Join("testdata", c.in), "--out", base + ext}
			if c.y != "" {
				args = append(args, "--y", c.y)
			}
			if err := run(args, io.Discard); err != nil {
				t.Fatalf("%s: %v", c.in, err)
			}
		}
		if n := count(decodePNG(t, base+".png", 800, 200), palette[0]); n < 100 {
			t.Errorf("%s: %d pixels of the first series' colour", c.in, n)
		}
		texts := svgTexts(t, base+".svg")
		if m := missing(texts, c.want...); len(m) > 0 {
			t.Errorf("%s: the SVG lacks %q; its texts are %q", c.in, m, texts)
		}
	}
}

func TestUnitLabel(t *testing.T) {
	for col, want := range map[string]string{
		"busbw_GBps": "busbw (GB/s)", "time_us": "time (µs)", "bytes": "size (bytes)", "grad_bytes": "grad (bytes)",
		"step_ms": "step (ms)", "value": "value", "ratio_vs_allreduce": "ratio vs allreduce",
	} {
		if got := unitLabel(col); got != want {
			t.Errorf("unitLabel(%q) = %q, want %q", col, got, want)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"--in", "x.csv", "extra"}, {"--in", "a.json", "--steps", "0"},
		{"--in", traces[0], "--out", "x.pdf"}, {"--in", "testdata/allreduce.csv", "--y", "nope"}, {"--inn", "x.csv"}} {
		if err := run(args, io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	if err := run([]string{"--in", filepath.Join(t.TempDir(), "missing.json")}, io.Discard); err == nil ||
		errors.Is(err, cli.ErrUsage) {
		t.Errorf("a missing input gave %v, want a plain error", err)
	}
	for _, arg := range []string{"-h", "--help"} {
		var out strings.Builder
		if err := run([]string{arg}, &out); cli.Code(err) != 0 || !strings.Contains(out.String(), "\n  --in string\n") {
			t.Errorf("%s: %v (exit %d), usage:\n%s", arg, err, cli.Code(err), out.String())
		}
	}
}

func TestNiceStep(t *testing.T) {
	for v, want := range map[float64]float64{0.13: 0.2, 1: 1, 3: 5, 7: 10, 42: 50, 0: 1} {
		if got := niceStep(v); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", v, got, want)
		}
	}
}
