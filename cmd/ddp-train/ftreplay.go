package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// runFTReplay is --ft-replay: the committed steps of a fault-tolerant
// run's --ft-record, taken again in one process. Each step sums its
// participants' gradients, each on the batch the record gives it, in the
// record's order, divides by their number and updates, as the replicas'
// --ft-ordered-sum did; its summary's param_digest is then the run's, to
// the bit.
func runFTReplay(ctx context.Context, c config, stderr io.Writer) error {
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	lines, err := readRecord(c.ftReplay)
	if err != nil {
		return err
	}
	ds, err := loadData(c)
	if err != nil {
		return err
	}
	groups, err := local.New(1, local.Options{Timeout: c.timeout})
	if err != nil {
		return err
	}
	defer groups[0].Close()
	t := trainer{c: c, g: groups[0], ds: ds, log: logger, out: io.Discard, stderr: stderr, buildMu: new(sync.Mutex)}
	return t.replay(ctx, lines)
}

func readRecord(path string) ([]ftRecordLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--ft-replay: %v", err)
	}
	defer f.Close()
	var lines []ftRecordLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l ftRecordLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, usagef("--ft-replay %s: line %d: %v", path, len(lines)+1, err)
		}
		if l.BatchesEach > 0 {
			return nil, usagef("--ft-replay %s: a DiLoCo run's record; its inner optimizers are the replicas' own, "+
				"and their replay is not built", path)
		}
		if l.Step != int64(len(lines)+1) || len(l.Participants) == 0 {
			return nil, usagef("--ft-replay %s: line %d is step %d with %d participants", path, len(lines)+1, l.Step,
				len(l.Participants))
		}
		lines = append(lines, l)
	}
	return lines, sc.Err()
}

// replay takes the recorded steps (runFTReplay).
func (t *trainer) replay(ctx context.Context, lines []ftRecordLine) error {
	s, err := t.build(ctx)
	if err != nil {
		return err
	}
	defer s.vm.Close()
	defer s.close(t.log)
	defer s.eval.close()
	s.total = t.totalSteps(s)
	if err := s.newSchedule(t.c, s.total); err != nil {
		return err
	}
	feed := newFeeder(t.ds, s.smp, t.c.batchSize)
	began := time.Now()
	var sum []pg.Tensor
	for _, l := range lines {
		for k := range l.Participants {
			if _, err := feed.load(s, l.FirstBatch+k); err != nil {
				return err
			}
			if err := s.ddp.RunAll(ctx, s.vm); err != nil {
				return fmt.Errorf("replaying step %d: %w", l.Step, err)
			}
			_, grads, err := s.ddp.StepTensors()
			if err != nil {
				return err
			}
			if sum == nil {
				sum = make([]pg.Tensor, len(grads))
				for i, g := range grads {
					sum[i] = pg.NewTensor(g.Dtype, g.Len())
				}
			}
			for i, g := range grads {
				if k == 0 {
					clear(sum[i].Data)
				}
				addTensor(sum[i], g)
			}
			if k < len(l.Participants)-1 {
				s.vm.Reset()
			}
		}
		params, grads, err := s.ddp.StepTensors()
		if err != nil {
			return err
		}
		for i, g := range grads {
			copy(g.Data, sum[i].Data)
			if err := commhook.Divide(g, len(l.Participants)); err != nil {
				return err
			}
		}
		if err := s.update(ctx, t.c, params, grads); err != nil {
			return err
		}
		s.vm.Reset()
	}
	d := digest(s.params)
	t.log.Info("replayed", zap.Int("steps", len(lines)), zap.String("param_digest", d))
	out := summary{Steps: len(lines), WallSeconds: time.Since(began).Seconds(), WorldSize: 1, Backend: "local",
		FaultTolerant: true, CommittedSteps: int64(len(lines)), ParamDigest: d, StateDigest: stateDigest(s)}
	return t.writeOutputs(s, out)
}

// addTensor adds src into dst, elementwise: float32 or float64.
func addTensor(dst, src pg.Tensor) {
	switch dst.Dtype {
	case pg.Float32:
		x, y := pg.View[float32](dst), pg.View[float32](src)
		for i := range x {
			x[i] += y[i]
		}
	case pg.Float64:
		x, y := pg.View[float64](dst), pg.View[float64](src)
		for i := range x {
			x[i] += y[i]
		}
	}
}
