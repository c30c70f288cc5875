package main

import (
	"errors"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/wiring/cli"
	"github.com/goddp/ddp/timeline"
)

// count is the number of pixels of colour c in the PNG at path.
func count(t *testing.T, path string, c color.RGBA) int {
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

func TestTraceToPNG(t *testing.T) {
	dir := t.TempDir()
	paths := writeTrace(t, dir)
	out := filepath.Join(dir, "t.png")
	if err := run([]string{"-in", paths[0] + "," + paths[1], "-out", out, "-steps", "2"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"forward", "backward", "launch", "communication", "wait", "step"} {
		if n := count(t, out, colorOf(name)); n < 50 {
			t.Errorf("%d pixels of %s's colour; its bars are missing", n, name)
		}
	}
}

// A trace cut short by a crash (no closing bracket) still plots.
func TestTruncatedTrace(t *testing.T) {
	dir := t.TempDir()
	paths := writeTrace(t, dir)
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.json")
	if err := os.WriteFile(cut, b[:len(b)-3], 0o644); err != nil { // drops "\n]\n"
		t.Fatal(err)
	}
	if err := run([]string{"-in", cut}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cut.png")); err != nil {
		t.Fatal(err)
	}
}

func TestCSVToPNG(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		// bench/allreduce: numeric x, a line chart on a log scale
		"allreduce.csv": "bytes,time_us,algbw_GBps,busbw_GBps\n4096,15.3,0.267,0.267\n65536,28.1,2.331,2.331\n1048576,222.5,4.712,4.712\n",
		// bench/ddpstep --format csv: names, a bar chart
		"ddpstep.csv": "# ddpstep: a comment line\nmetric,value\nstep_ms,12.5\ncomm_ms,3.4\n",
	}
	for name, body := range cases {
		in := filepath.Join(dir, name)
		if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := run([]string{"-in", in}, io.Discard); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := count(t, in[:len(in)-4]+".png", seriesColor); n < 100 {
			t.Errorf("%s: %d pixels of the series colour", name, n)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-in", "x.csv", "extra"}, {"-in", "a.json", "-steps", "0"}} {
		if err := run(args, io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	if err := run([]string{"-in", filepath.Join(t.TempDir(), "missing.json")}, io.Discard); err == nil || errors.Is(err, cli.ErrUsage) {
		t.Errorf("a missing input gave %v, want a plain error", err)
	}
}

func TestNiceStep(t *testing.T) {
	for v, want := range map[float64]float64{0.13: 0.2, 1: 1, 3: 5, 7: 10, 42: 50} {
		if got := niceStep(v); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", v, got, want)
		}
	}
}
