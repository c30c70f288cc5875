package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goddp/ddp/ft"
	"go.uber.org/zap"
)

// Note [ddp-train lighthouse]
//
// `ddp-train lighthouse --listen HOST:PORT --min-replicas N
// [--join-timeout D] [--quorum-tick D] [--heartbeat-timeout D]` runs the
// quorum service of fault-tolerant training (package ft,
// docs/fault-tolerance.md): torchft's lighthouse, over HTTP, every request
// signed with GODDP_SECRET, which it refuses to start without (exit 2).
// The defaults are torchft's (60s, 100ms, 5s). It logs every change of
// quorum status and every quorum formed, and runs until SIGINT or SIGTERM,
// then exits 128+signal, as ddp-train does.

// runLighthouse is `ddp-train lighthouse`.
func runLighthouse(args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(ch)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sig syscall.Signal
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case s := <-ch:
			sig = s.(syscall.Signal)
			cancel()
		case <-ctx.Done():
		}
	}()
	code := lighthouseMain(ctx, args, lookup, stderr, nil)
	cancel()
	<-stopped
	if code == 0 && sig != 0 {
		return 128 + int(sig)
	}
	return code
}

// errFlagsReported is a bad command line that package flag has reported.
var errFlagsReported = errors.New("bad flags")

// lighthouseFlags are `ddp-train lighthouse`'s settings.
type lighthouseFlags struct {
	listen    string
	opt       ft.Options
	logFormat string
	logLevel  string
}

func parseLighthouseFlags(args []string, stderr io.Writer) (lighthouseFlags, error) {
	f := lighthouseFlags{opt: ft.DefaultOptions(0)}
	fs := flag.NewFlagSet("ddp-train lighthouse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.listen, "listen", "", "HOST:PORT to serve on (required)")
	fs.IntVar(&f.opt.MinReplicas, "min-replicas", 0, "the fewest replica groups a new quorum may have (required)")
	fs.DurationVar(&f.opt.JoinTimeout, "join-timeout", ft.DefaultJoinTimeout,
		"how long a valid quorum waits for healthy replicas that have not asked")
	fs.DurationVar(&f.opt.QuorumTick, "quorum-tick", ft.DefaultQuorumTick, "how often to check for a quorum")
	fs.DurationVar(&f.opt.HeartbeatTimeout, "heartbeat-timeout", ft.DefaultHeartbeatTimeout,
		"a replica silent this long is not healthy")
	fs.StringVar(&f.logFormat, "log-format", "console", "log format: console or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ddp-train lighthouse --listen HOST:PORT --min-replicas N [flags]\n\n"+
			"Serves the quorum of fault-tolerant training (docs/fault-tolerance.md); the secret is GODDP_SECRET.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return f, err
		}
		return f, errFlagsReported // flag has printed it
	}
	switch {
	case fs.NArg() > 0:
		return f, usagef("ddp-train lighthouse takes no arguments, got %q", fs.Args())
	case f.listen == "":
		return f, usagef("ddp-train lighthouse needs --listen HOST:PORT")
	case f.opt.MinReplicas < 1:
		return f, usagef("ddp-train lighthouse needs --min-replicas of at least 1")
	case f.logFormat != "console" && f.logFormat != "json":
		return f, usagef("--log-format %q: want console or json", f.logFormat)
	}
	return f, nil
}

// lighthouseMain serves until ctx ends; ready, if not nil, learns the
// address once it listens.
func lighthouseMain(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer,
	ready func(addr string)) int {
	f, err := parseLighthouseFlags(args, stderr)
	switch {
	case err == flag.ErrHelp:
		return 0
	case err == errFlagsReported:
		return 2
	case err != nil:
		return report(stderr, err)
	}
	v, ok := lookup("GODDP_SECRET")
	if !ok {
		return report(stderr, usagef("GODDP_SECRET is not set; the lighthouse and every replica need the job's "+
			"secret of at least %d bytes (e.g. GODDP_SECRET=$(openssl rand -hex 32))", ft.MinSecret))
	}
	secret, err := ft.DecodeSecret(v)
	if err != nil {
		return report(stderr, usageError{err})
	}
	log, err := newLogger(config{logFormat: f.logFormat, logLevel: f.logLevel}, stderr)
	if err != nil {
		return report(stderr, err)
	}
	defer func() { _ = log.Sync() }()
	f.opt.Logger = log.Named("lighthouse")
	srv, err := ft.NewServer(ctx, f.listen, secret, f.opt)
	if err != nil {
		return report(stderr, err)
	}
	if ready != nil {
		ready(srv.Addr())
	}
	<-ctx.Done()
	start := time.Now()
	err = srv.Close()
	log.Info("lighthouse stopped", zap.Duration("close", time.Since(start)))
	return report(stderr, err)
}
