package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/goddp/ddp/internal/httpserve"
	"go.uber.org/zap"
)

// Note [debug endpoints are private]
//
// /debug/pprof/ hands out every goroutine's stack, the command line and
// profiles, and sets the profiler running; /debug/state and
// /debug/flight tell the job's progress. None of it is for whoever can
// reach a port, and --metrics-addr :9400 (a Kubernetes pod, the
// docs/launchers.md's examples) is reachable by every pod of the cluster. So:
//
//   - --metrics-addr serves /metrics, /healthz and /readyz to any client,
//     and /debug/* only to one that came over loopback: from 127.0.0.1
//     or ::1 to 127.0.0.1 or ::1 (httpserve.Loopback). With
//     --metrics-addr 127.0.0.1:9400 that is every client, as before; with
//     :9400, `curl 127.0.0.1:9400/debug/state` inside the pod (kubectl
//     exec) and through `kubectl port-forward` works, and any other client
//     gets 404 and a line naming --debug-addr. A remote client cannot
//     send from a loopback address, and the check is of the connection,
//     not of a header a proxy or the client could set.
//   - --debug-addr host:port (worker i on port+i, as --metrics-addr)
//     serves /debug/* there to any client that reaches it, as the user
//     asked on purpose; --metrics-addr then serves no /debug/* at all.
//
// Every server runs within httpserve.DefaultLimits (timeouts on reading,
// writing and idling, a header size cap, at most 32 connections, the
// rest waiting to be accepted), so idle keep-alive connections cannot
// exhaust the file descriptors the run needs. A profile or trace takes
// at most httpserve.MaxProfile: a longer one is refused with 400, not
// clamped, since the caller asked for something else; and one runs at a
// time: a second is refused at once with 429, rather than left waiting.
// A trace nobody reads stops at the write timeout, so its buffers cannot
// grow without bound.

// validateDebugAddr checks --debug-addr as --metrics-addr (Note [limits]),
// and that the two do not share a port.
func (c config) validateDebugAddr() error {
	if err := checkAddr("--debug-addr", c.debugAddr, c.metricsPorts()); err != nil || c.debugAddr == "" ||
		c.metricsAddr == "" {
		return err
	}
	dh, dp, _ := net.SplitHostPort(c.debugAddr)
	mh, mp, _ := net.SplitHostPort(c.metricsAddr)
	d, _ := strconv.Atoi(dp)
	m, _ := strconv.Atoi(mp)
	n := c.metricsPorts()
	sameHost := dh == mh || anyHost(dh) || anyHost(mh)
	if sameHost && d < m+n && m < d+n && d != 0 && m != 0 {
		return usagef("--debug-addr %q and --metrics-addr %q: both would use port %d; give --debug-addr ports of its own "+
			"(worker i serves on port+i)", c.debugAddr, c.metricsAddr, max(d, m))
	}
	return nil
}

// anyHost reports whether host listens on every interface.
func anyHost(host string) bool { return host == "" || host == "0.0.0.0" || host == "::" }

// rankAddr is flag's host:port with the port moved up by rank.
func rankAddr(flag, addr string, rank int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return "", usagef("%s %q: want host:port", flag, addr)
	}
	if p != 0 {
		p += rank
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// serveDebug serves /debug/* on --debug-addr's port plus rank, or returns
// nil without the flag (Note [debug endpoints are private]).
func serveDebug(c config, rank int, d *debugState, log *zap.Logger) (*httpserve.Server, error) {
	if c.debugAddr == "" {
		return nil, nil
	}
	addr, err := rankAddr("--debug-addr", c.debugAddr, rank)
	if err != nil {
		return nil, err
	}
	// listening does not block
	srv, err := httpserve.Start(context.Background(), addr, debugMux(d), httpserve.DefaultLimits())
	if err != nil {
		return nil, fmt.Errorf("--debug-addr: rank %d cannot listen on %s: %w", rank, addr, err)
	}
	log.Info("serving debug endpoints to any client that reaches them", zap.String("addr", "http://"+srv.Addr().String()+"/debug/"))
	return srv, nil
}

// loopbackOnly serves h to clients that came over loopback, and 404 to
// the others (Note [debug endpoints are private]).
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpserve.Loopback(r) {
			http.Error(w, "404 not found: /debug/ is served to loopback clients only (127.0.0.1, ::1); to serve it elsewhere, "+
				"start ddp-train with --debug-addr host:port", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// profileGate lets one profile or trace run at a time, of at most
// httpserve.MaxProfile (Note [debug endpoints are private]).
type profileGate struct{ busy atomic.Bool }

// wrap guards h, which takes a duration in its seconds parameter; always
// says whether h runs for a while without one (profile: 30 s, trace: 1 s),
// else only a request with seconds is held to the gate (a delta profile).
func (g *profileGate) wrap(h http.HandlerFunc, always bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := r.FormValue("seconds")
		if s == "" && !always {
			h(w, r)
			return
		}
		if sec, err := strconv.ParseFloat(s, 64); err == nil && (sec > httpserve.MaxProfile.Seconds() || math.IsNaN(sec)) {
			http.Error(w,
				fmt.Sprintf("seconds=%s: a profile or trace takes at most %.0f seconds here; ask for less", s,
					httpserve.MaxProfile.Seconds()), http.StatusBadRequest)
			return
		}
		if !g.busy.CompareAndSwap(false, true) {
			w.Header().Set("Retry-After", strconv.Itoa(int(httpserve.MaxProfile.Seconds())))
			http.Error(w, "another profile or trace is running on this rank; one runs at a time, try again when it ends",
				http.StatusTooManyRequests)
			return
		}
		defer g.busy.Store(false)
		h(w, r)
	}
}
