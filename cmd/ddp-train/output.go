package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/goddp/ddp/internal/httpserve"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/timeline"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger writes to stderr in the chosen format. The libraries add the
// rank to their own lines.
func newLogger(c config, stderr io.Writer) (*zap.Logger, error) {
	enc := zapcore.EncoderConfig{
		TimeKey: "ts", LevelKey: "level", MessageKey: "msg", NameKey: "logger",
		EncodeTime: zapcore.ISO8601TimeEncoder, EncodeLevel: zapcore.LowercaseLevelEncoder,
		EncodeDuration: zapcore.StringDurationEncoder,
	}
	var e zapcore.Encoder = zapcore.NewConsoleEncoder(enc)
	if c.logFormat == "json" {
		e = zapcore.NewJSONEncoder(enc)
	}
	level, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return nil, usagef("--log-level %q: %v", c.logLevel, err)
	}
	core := zapcore.NewCore(e, zapcore.AddSync(stderr), level)
	return zap.New(core), nil
}

// summary is --summary's JSON.
type summary struct {
	Steps         int     `json:"steps"`
	FinalLoss     float64 `json:"final_loss"`
	Accuracy      float64 `json:"accuracy"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	WallSeconds   float64 `json:"wall_seconds"`
	WorldSize     int     `json:"world_size"`
	Backend       string  `json:"backend"`
	CommHook      string  `json:"comm_hook"`
	Engine        string  `json:"engine"`                    // --engine
	Dropout       float64 `json:"dropout,omitempty"`         // --dropout (--engine gomlx)
	MixedPrec     string  `json:"mixed_precision,omitempty"` // --mixed-precision (--engine gomlx)
	SkippedSteps  int     `json:"skipped_steps"`             // updates skipped by --on-nonfinite skip
	// Rank 0's optimizer-state bytes: its share with --zero (Zero), the
	// whole state without.
	OptimizerStateBytes int64  `json:"optimizer_state_bytes"`
	Zero                bool   `json:"zero"`
	ZeroOverlap         string `json:"zero_overlap"` // --zero-overlap: off, interleaved or deferred
	// DiLoCo (--diloco-sync-every; diloco.go), rank 0's: fragments applied,
	// pseudo-gradient bytes sent, seconds in DiLoCo's steps; absent without.
	// --fault-tolerant (ftworker.go, ftlaunch.go): the finished replica's
	// counts, and the launcher's
	FaultTolerant    bool    `json:"fault_tolerant,omitempty"`
	CommittedSteps   int64   `json:"committed_steps,omitempty"`
	DiscardedSteps   int64   `json:"discarded_steps,omitempty"`
	ParticipantsMean float64 `json:"participants_mean,omitempty"`
	Recoveries       int64   `json:"recoveries,omitempty"`
	RecoveredBytes   int64   `json:"recovered_bytes,omitempty"`
	RecoverySeconds  float64 `json:"recovery_seconds,omitempty"`
	QuorumChanges    int64   `json:"quorum_changes,omitempty"`
	ReplicaRestarts  int     `json:"replica_restarts,omitempty"`
	ReplicasFinished int     `json:"replicas_finished,omitempty"`
	ParamDigest      string  `json:"param_digest,omitempty"`
	StateDigest      string  `json:"state_digest,omitempty"` // the parameters and the optimizer's state
	CommitChain      string  `json:"commit_chain,omitempty"` // --fault-tolerant: the last commit's (package ft)

	DiLoCoOuterSteps  int     `json:"diloco_outer_steps,omitempty"`
	DiLoCoBytesSent   int64   `json:"diloco_bytes_sent,omitempty"`
	DiLoCoSyncSeconds float64 `json:"diloco_sync_seconds,omitempty"`
	// The last held-out evaluation (--eval-data; eval.go); absent without one.
	EvalLoss     *float64 `json:"eval_loss,omitempty"`
	EvalAccuracy *float64 `json:"eval_accuracy,omitempty"`
	EvalSamples  int      `json:"eval_samples,omitempty"`
	EvalStep     *int     `json:"eval_step,omitempty"`
}

// setEval records the last evaluation, if there was one.
func (s *summary) setEval(r *evalResult) {
	if r != nil {
		s.EvalLoss, s.EvalAccuracy, s.EvalSamples, s.EvalStep = &r.Loss, &r.Accuracy, r.Samples, &r.Step
	}
}

func summaryOf(t *trainer, r figures, steps int, wall time.Duration) summary {
	samples := float64(steps * t.c.gradAccum * t.c.batchSize * t.g.Size())
	return summary{Steps: steps, FinalLoss: r.Loss, Accuracy: r.Accuracy, SamplesPerSec: samples / wall.Seconds(),
		WallSeconds: wall.Seconds(), WorldSize: t.g.Size(), Backend: pg.BackendName(t.g), CommHook: t.c.commHook,
		Engine: t.c.engine, Dropout: t.c.dropout, MixedPrec: t.c.mixedPrecision}
}

// metricsServer serves /metrics for one rank, and the probes Kubernetes
// asks for: /healthz (the process is up) and /readyz (its process group
// has formed), or nothing without --metrics-addr; and the debug
// endpoints (Note [debug endpoints are private]).
type metricsServer struct {
	m     *trainingMetrics // nil when off
	reg   *prometheus.Registry
	srv   *httpserve.Server // --metrics-addr's; nil without it
	debug *httpserve.Server // --debug-addr's; nil without it
	ready *atomic.Bool      // set once the process group has formed
	dbg   *debugState       // /debug/state and the failure report (debug.go)
}

// setReady makes /readyz answer 200: the process group has formed.
func (m *metricsServer) setReady() {
	if m.ready != nil {
		m.ready.Store(true)
	}
}

// probes adds /healthz and /readyz to mux.
func probes(mux *http.ServeMux, ready *atomic.Bool) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "the process group has not formed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// registerer is where the reducer and the process group register their
// metrics: nil when metrics are off.
func (m *metricsServer) registerer() prometheus.Registerer {
	if m.reg == nil {
		return nil
	}
	return m.reg
}

// serveMetrics listens on --metrics-addr's port plus rank, and on
// --debug-addr's.
func serveMetrics(c config, rank int, log *zap.Logger) (*metricsServer, error) {
	dbg := newDebugState(rank)
	debug, err := serveDebug(c, rank, dbg, log) // debughttp.go
	if err != nil {
		return nil, err
	}
	if c.metricsAddr == "" {
		return &metricsServer{dbg: dbg, debug: debug}, nil
	}
	addr, err := rankAddr("--metrics-addr", c.metricsAddr, rank)
	if err != nil {
		debug.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tm := newTrainingMetrics()
	reg.MustRegister(tm.collectors()...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ready := new(atomic.Bool)
	probes(mux, ready)
	if debug == nil {
		mux.Handle("/debug/", loopbackOnly(debugMux(dbg))) // Note [debug endpoints are private]
	}
	srv, err := httpserve.Start(context.Background(), addr, mux, httpserve.DefaultLimits()) // listening does not block
	if err != nil {
		debug.Close()
		return nil, fmt.Errorf("--metrics-addr: rank %d cannot listen on %s: %w", rank, addr, err)
	}
	debugWhere := "on --debug-addr"
	if debug == nil {
		debugWhere = "here, to loopback clients only (--debug-addr serves them elsewhere)"
	}
	log.Info("serving metrics", zap.String("addr", "http://"+srv.Addr().String()+"/metrics"), zap.String("debug_endpoints", debugWhere))
	return &metricsServer{m: &tm, reg: reg, srv: srv, debug: debug, ready: ready, dbg: dbg}, nil
}

// Close stops both servers.
func (m *metricsServer) Close() error {
	return errors.Join(m.srv.Close(), m.debug.Close())
}

// openTimeline creates --timeline DIR/rank-N.json, or returns nil.
func (t *trainer) openTimeline() (*timeline.Writer, error) {
	if t.c.timeline == "" {
		return nil, nil
	}
	if err := os.MkdirAll(t.c.timeline, 0o755); err != nil {
		return nil, fmt.Errorf("--timeline: %w", err)
	}
	w, err := timeline.Create(filepath.Join(t.c.timeline, fmt.Sprintf("rank-%d.json", t.g.Rank())), t.g.Rank())
	if err != nil {
		return nil, fmt.Errorf("--timeline: %w", err)
	}
	return w, nil
}

// closeTimeline finishes the trace; a failure is logged, not fatal.
func (s *session) closeTimeline(log *zap.Logger) {
	if s == nil || s.tl == nil {
		return
	}
	if err := s.tl.Close(); err != nil {
		log.Warn("--timeline: the trace is incomplete", zap.Error(err))
	}
}
