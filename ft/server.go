package ft

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/goddp/ddp/internal/httpserve"
	"go.uber.org/zap"
)

// The Server's endpoints; every one takes and returns JSON, and every
// request is signed (auth.go).
const (
	PathHeartbeat = "/v1/heartbeat" // POST {"replica_id": ...}
	PathQuorum    = "/v1/quorum"    // POST a Member; answers the Quorum once formed
	PathStatus    = "/v1/status"    // GET; answers a Status
)

const maxBody = 1 << 20 // a request body, at most

// Server serves a Lighthouse over HTTP. A request's wait for a quorum is
// bounded by its client: it ends when the client goes away. A Server
// keeps no state across restarts; replicas re-register by asking again.
type Server struct {
	lh     *Lighthouse
	secret []byte
	log    *zap.Logger
	srv    *httpserve.Server
	cancel context.CancelFunc
	run    sync.WaitGroup // the tick loop

	mu       sync.Mutex
	closing  bool
	handlers sync.WaitGroup // the handlers running; none starts once closing
}

// limits are httpserve's, but with no write deadline (a quorum request
// waits as long as its client does, JoinTimeout and more) and room for
// two connections per replica group (heartbeats and quorum requests).
func limits() httpserve.Limits {
	l := httpserve.DefaultLimits()
	l.Write, l.MaxConns = 0, 4096
	return l
}

// NewServer listens on addr and serves a new Lighthouse of opt there,
// its requests signed with secret (at least MinSecret bytes), until
// Close.
func NewServer(ctx context.Context, addr string, secret []byte, opt Options) (*Server, error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	lh, err := NewLighthouse(opt)
	if err != nil {
		return nil, err
	}
	s := &Server{lh: lh, secret: append([]byte(nil), secret...), log: lh.log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathHeartbeat, s.auth(s.heartbeat))
	mux.HandleFunc("POST "+PathQuorum, s.auth(s.quorum))
	mux.HandleFunc("GET "+PathStatus, s.auth(s.status))
	if s.srv, err = httpserve.Start(ctx, addr, mux, limits()); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.run.Go(func() { lh.Run(runCtx) })
	s.log.Info("lighthouse listening", zap.String("addr", s.Addr()), zap.Int("min_replicas", opt.MinReplicas),
		zap.Duration("join_timeout", opt.JoinTimeout), zap.Duration("heartbeat_timeout", opt.HeartbeatTimeout))
	return s, nil
}

// Addr is the address the Server listens on, host:port.
func (s *Server) Addr() string { return s.srv.Addr().String() }

// Lighthouse is the state machine s serves.
func (s *Server) Lighthouse() *Lighthouse { return s.lh }

// Close stops serving: waiting requests end, the connections close, and
// Close returns once every handler has.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.lh.Close()
	s.cancel()
	err := s.srv.Close()
	s.run.Wait()
	s.handlers.Wait()
	return err
}

// enter counts a handler in, unless s is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.handlers.Add(1)
	return true
}

type handler func(w http.ResponseWriter, r *http.Request, body []byte)

// auth reads the body and refuses a request not signed with s's secret:
// 401 and a message.
func (s *Server) auth(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			httpError(w, http.StatusServiceUnavailable, ErrClosed)
			return
		}
		defer s.handlers.Done()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			httpError(w, http.StatusRequestEntityTooLarge, err)
			return
		}
		if err := verify(r, s.secret, time.Now(), body); err != nil {
			s.log.Warn("refused a request", zap.String("path", r.URL.Path), zap.String("from", r.RemoteAddr))
			httpError(w, http.StatusUnauthorized, err)
			return
		}
		h(w, r, body)
	}
}

type heartbeatRequest struct {
	ReplicaID string `json:"replica_id"`
}

func (s *Server) heartbeat(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req heartbeatRequest
	if err := json.Unmarshal(body, &req); err != nil || req.ReplicaID == "" {
		httpError(w, http.StatusBadRequest, errors.New("a heartbeat needs a replica_id"))
		return
	}
	s.lh.Heartbeat(req.ReplicaID)
	writeJSON(w, struct{}{})
}

func (s *Server) quorum(w http.ResponseWriter, r *http.Request, body []byte) {
	var m Member
	if err := json.Unmarshal(body, &m); err != nil || m.ReplicaID == "" {
		httpError(w, http.StatusBadRequest, errors.New("a quorum request needs a member with a replica_id"))
		return
	}
	q, err := s.lh.Join(r.Context(), m)
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, err) // the client left, or the server is closing
		return
	}
	writeJSON(w, q)
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request, _ []byte) {
	writeJSON(w, s.lh.Status())
}

// errorBody is the body of every refusal.
type errorBody struct {
	Error string `json:"error"`
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Error: "ft: " + err.Error()})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
