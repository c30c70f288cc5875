package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/internal/cli"
)

// probeSizes: one tiny allreduce (recursive doubling: its time is the
// latency) and three from the ring threshold up (the ring: 2α + S/β with
// two ranks), whose fit gives α and β.
const probeSizes = "8,524288,2097152,8388608"

// calibration is a link's measured α and β, from pg/tcp's allreduce
// between two ranks.
type calibration struct {
	Rate      string  // the tc cap; "" none
	Tiny      float64 // seconds for an 8-byte allreduce (one doubling round)
	Latency   float64 // α, seconds: Tiny less 8 bytes' transfer
	Bandwidth float64 // β, bytes per second: the ring fit's inverse slope
	Rows      []probeRow
}

func (c calibration) link() scalemodel.Link {
	return scalemodel.Link{Latency: c.Latency, Bandwidth: c.Bandwidth}
}

func (c calibration) String() string {
	return fmt.Sprintf("α %.1f µs, β %.1f MB/s (%.0f Mbit/s), 8-byte allreduce %.1f µs",
		c.Latency*1e6, c.Bandwidth/1e6, c.Bandwidth*8/1e6, c.Tiny*1e6)
}

// calibrate measures the link between ranks: across hosts (one rank on
// each of two hosts) when intra is false, else two ranks on host 0
// (loopback TCP inside its namespace, or shared memory with shm).
func calibrate(ctx context.Context, j *bedJob, rate string, intra, shm bool, budget time.Duration) (calibration,
	error) {
	self, err := os.Executable()
	if err != nil {
		return calibration{}, err
	}
	if err := j.setRate(ctx, rate); err != nil {
		return calibration{}, err
	}
	argv := []string{self, probeWorkerCmd, "--sizes", probeSizes, "--budget", budget.String(),
		"--shm=" + strconv.FormatBool(shm)}
	var outs []string
	name := "probe-inter-" + rate
	if intra {
		hosts := j.hosts
		j.hosts = 1 // both ranks on host 0
		outs, err = j.run(ctx, 2, 3*time.Minute, "probe-intra-shm-"+strconv.FormatBool(shm), argv...)
		j.hosts = hosts
	} else {
		outs, err = j.run(ctx, 1, 3*time.Minute, name, argv...)
	}
	if err != nil {
		return calibration{}, err
	}
	c := calibration{Rate: rate}
	dec := json.NewDecoder(strings.NewReader(outs[0]))
	for dec.More() {
		var r probeRow
		if err := dec.Decode(&r); err != nil {
			return c, err
		}
		c.Rows = append(c.Rows, r)
	}
	return c, c.fit()
}

// fit takes α and β from the rows: a least squares line through the
// ring sizes (t = 2α + S/β between two ranks) gives β, and the 8-byte
// row (Tiny, one doubling round: t = α + 8/β) gives α.
func (c *calibration) fit() error {
	var xs, ys []float64
	for _, r := range c.Rows {
		if r.Bytes < scalemodel.RingThreshold {
			c.Tiny = r.Seconds
			continue
		}
		xs, ys = append(xs, float64(r.Bytes)), append(ys, r.Seconds)
	}
	if len(xs) < 2 {
		return fmt.Errorf("calibration: %d ring sizes measured; want 2", len(xs))
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	slope := sxy / sxx
	if !(slope > 0) {
		return fmt.Errorf("calibration: time does not grow with size (%v)", c.Rows)
	}
	c.Bandwidth = 1 / slope
	// The ring pipelines its rounds, so its intercept says little about
	// a round's latency (it comes out near zero, or below); the 8-byte
	// allreduce, one round of recursive doubling between two ranks, is α.
	c.Latency = max(c.Tiny-8*slope, 0)
	return nil
}

func runCalibrate(args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("scale calibrate", stderr)
	rates := fs.String("rates", "none,1gbit,100mbit", "link caps to measure, comma-separated (none: uncapped)")
	budget := fs.Duration("budget", 2*time.Second, "time per size")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "scale-calibrate-")
	if err != nil {
		return err
	}
	j, err := newBedJob(ctx, 2, dir, nil)
	if err != nil {
		return err
	}
	defer j.Close()
	c, err := calibrate(ctx, j, "", true, false, *budget)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "intra-host (loopback TCP in one namespace): %v\n", c)
	for _, r := range strings.Split(*rates, ",") {
		c, err := calibrate(ctx, j, rateArg(r), false, false, *budget)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "between hosts, cap %s: %v\n", r, c)
	}
	return nil
}

// rateArg is a --rates entry as netbed takes it: "none" is "".
func rateArg(r string) string {
	if r == "none" {
		return ""
	}
	return r
}
