package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func main() {
	var c config
	flag.IntVar(&c.steps, "steps", 100, "optimizer steps")
	flag.Float64Var(&c.clip, "clip", 0.5, "clip each bucket's gradient to at most this norm before averaging")
	flag.StringVar(&c.metricsAddr, "metrics-addr", "", "serve /metrics on host:port (rank r on port+r); empty: no server")
	flag.Parse()
	if err := run(context.Background(), c, nil); err != nil {
		fmt.Fprintln(os.Stderr, "hookmetrics:", err)
		os.Exit(1)
	}
}

type config struct {
	steps       int
	clip        float64
	metricsAddr string
}

// clipHook is the custom hook: it scales a bucket down to norm c.clip if
// it is longer, counts the buckets it clipped, then averages as
// commhook.Allreduce does.
func clipHook(maxNorm float64, clipped prometheus.Counter) commhook.Hook {
	return commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		grad := pg.View[float64](b.Buffer) // the model is float64
		var sq float64
		for _, v := range grad {
			sq += v * v
		}
		if norm := math.Sqrt(sq); norm > maxNorm {
			for i := range grad {
				grad[i] *= maxNorm / norm
			}
			clipped.Inc()
		}
		return commhook.Allreduce{}.Run(ctx, g, b)
	})
}

// run trains; ready, if not nil, receives the metrics address once served.
func run(ctx context.Context, c config, ready chan<- string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	g, err := dist.InitProcessGroup(ctx, dist.Options{})
	if err != nil {
		return err
	}
	defer g.Close()
	reg := prometheus.NewRegistry()
	clipped := prometheus.NewCounter(prometheus.CounterOpts{Name: "example_clipped_buckets_total",
		Help: "Buckets the hook clipped."})
	reg.MustRegister(clipped)
	stop, err := serve(ctx, c.metricsAddr, g.Rank(), reg, ready)
	if err != nil {
		return err
	}
	defer stop()

	graph := G.NewGraph()
	x := G.NewMatrix(graph, tensor.Float64, G.WithShape(16, 4), G.WithName("x"), G.WithInit(G.Zeroes()))
	w := G.NewMatrix(graph, tensor.Float64, G.WithShape(4, 1), G.WithName("w"), G.WithInit(G.Zeroes()))
	d, err := ddp.Wrap(ctx, g, G.Nodes{w}, ddp.Options{Hook: clipHook(c.clip, clipped), Registerer: reg})
	if err != nil {
		return err
	}
	pred, err := G.Mul(x, d.Node(0))
	if err != nil {
		return err
	}
	loss, err := G.Mean(G.Must(G.Square(G.Must(G.Sub(pred, G.NewConstant(3.0))))))
	if err != nil {
		return err
	}
	if _, err := d.Grad(loss); err != nil {
		return err
	}
	vm := G.NewTapeMachine(graph)
	defer vm.Close()
	opt, err := optim.New("sgd", 0.1, 1)
	if err != nil {
		return err
	}
	for step := range c.steps {
		data := make([]float64, 16*4)
		for i := range data {
			data[i] = math.Sin(float64(step*64+i+g.Rank()*7)) + 1
		}
		if err := G.Let(x, tensor.New(tensor.WithShape(16, 4), tensor.WithBacking(data))); err != nil {
			return err
		}
		if err := d.RunAll(ctx, vm); err != nil {
			return err
		}
		params, grads, err := d.StepTensors()
		if err == nil {
			err = opt.Step(params, grads)
		}
		if err != nil {
			return err
		}
		vm.Reset()
	}
	fmt.Printf("rank %d of %d: loss %.4f after %d steps\n", g.Rank(), g.Size(), loss.Value().Data().(float64), c.steps)
	return nil
}

// serve serves reg on addr's port plus rank and returns how to stop. The
// server's timeouts and header cap cut off a client that trickles its
// request, never reads its response or idles on a keep-alive connection;
// a server open to untrusted clients caps its connections too
// (golang.org/x/net/netutil.LimitListener), as ddp-train's do.
func serve(ctx context.Context, addr string, rank int, reg *prometheus.Registry, ready chan<- string) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return nil, fmt.Errorf("--metrics-addr %q: want host:port", addr)
	}
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(p+rank)))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l) // returns http.ErrServerClosed once stopped
	}()
	if ready != nil {
		ready <- l.Addr().String()
	}
	return func() { srv.Close(); <-served }, nil
}
