package ft

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/internal/httpserve"
)

// Note [live recovery]: a replica behind the quorum's max step heals from
// the up-to-date member Results assigns it (round robin), over HTTP:
//
//   - At Start, the source encodes its state (Stateful.Snapshot) before
//     the step's update and serves it, under the quorum id and its step,
//     until it serves a newer one or for the Manager's Timeout after it
//     was taken (a healer whose vote came too late for the others still
//     gets the whole state, and is up to date at the next step): GET /v1/recovery/<quorum>/<step> is the manifest
//     (length, chunk size, a SHA-256 per chunk and of the whole), signed
//     with the job's secret like every request; GET .../<chunk> is one
//     chunk.
//   - The healer fetches the manifest (retrying while its source has not
//     reached the step yet) and the chunks one by one in the background,
//     checking each chunk's digest (a bad chunk is fetched again, up to 3
//     times) and the whole's, while the step's collectives go on with its
//     zeros. Its Commit waits for the transfer, restores the state and
//     only then votes: the others wait for it in the vote, within the
//     group's timeout, which must therefore exceed a recovery's time.
//
// A source that dies mid-transfer fails the healer's fetch, so its vote
// is 0, and the step is discarded everywhere (the group is broken anyway);
// at the next quorum the healer is assigned a live source.

// Recovery paths.
const pathRecovery = "/v1/recovery/"

// manifest describes one snapshot.
type manifest struct {
	QuorumID   int64    `json:"quorum_id"`
	Step       int64    `json:"step"`
	Bytes      int64    `json:"bytes"`
	ChunkBytes int      `json:"chunk_bytes"`
	Chunks     []string `json:"chunks"` // hex SHA-256 of each chunk
	SHA256     string   `json:"sha256"` // of the whole
}

type snapshot struct {
	m    manifest
	data []byte
}

// recoveryServer serves this replica's snapshot, when it has one.
type recoveryServer struct {
	srv    *httpserve.Server
	secret []byte
	chunk  int
	log    *zap.Logger

	mu     sync.Mutex
	snap   *snapshot
	expiry *time.Timer // drops snap
}

func startRecoveryServer(ctx context.Context, addr string, secret []byte, chunk int, log *zap.Logger) (
	*recoveryServer, error) {
	r := &recoveryServer{secret: append([]byte(nil), secret...), chunk: chunk, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathRecovery+"{quorum}/{step}", r.auth(r.manifest))
	mux.HandleFunc("GET "+pathRecovery+"{quorum}/{step}/{chunk}", r.auth(r.chunkOf))
	l := httpserve.DefaultLimits()
	l.Write = 0 // a chunk takes as long as the link needs; the healer's context bounds it
	var err error
	if r.srv, err = httpserve.Start(ctx, addr, mux, l); err != nil {
		return nil, fmt.Errorf("ft: the recovery server: %w", err)
	}
	return r, nil
}

func (r *recoveryServer) Addr() string { return r.srv.Addr().String() }

func (r *recoveryServer) Close() error {
	r.mu.Lock()
	if r.expiry != nil {
		r.expiry.Stop()
	}
	r.snap = nil
	r.mu.Unlock()
	return r.srv.Close()
}

// put serves data as the snapshot at quorum q, step, for ttl.
func (r *recoveryServer) put(q, step int64, data []byte, ttl time.Duration) manifest {
	m := manifest{QuorumID: q, Step: step, Bytes: int64(len(data)), ChunkBytes: r.chunk}
	for off := 0; off < len(data); off += r.chunk {
		sum := sha256.Sum256(data[off:min(off+r.chunk, len(data))])
		m.Chunks = append(m.Chunks, hex.EncodeToString(sum[:]))
	}
	sum := sha256.Sum256(data)
	m.SHA256 = hex.EncodeToString(sum[:])
	snap := &snapshot{m: m, data: data}
	r.mu.Lock()
	r.snap = snap
	if r.expiry != nil {
		r.expiry.Stop()
	}
	r.expiry = time.AfterFunc(ttl, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.snap == snap {
			r.snap = nil
		}
	})
	r.mu.Unlock()
	return m
}

func (r *recoveryServer) auth(h func(http.ResponseWriter, *http.Request, *snapshot)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if err := verify(req, r.secret, time.Now(), nil); err != nil {
			r.log.Warn("refused a recovery request", zap.String("path", req.URL.Path), zap.String("from", req.RemoteAddr))
			httpError(w, http.StatusUnauthorized, err)
			return
		}
		q, err1 := strconv.ParseInt(req.PathValue("quorum"), 10, 64)
		step, err2 := strconv.ParseInt(req.PathValue("step"), 10, 64)
		if err1 != nil || err2 != nil {
			httpError(w, http.StatusBadRequest, errors.New("ft: a recovery path is /v1/recovery/<quorum>/<step>"))
			return
		}
		r.mu.Lock()
		s := r.snap
		r.mu.Unlock()
		if s == nil || s.m.QuorumID != q || s.m.Step != step {
			httpError(w, http.StatusNotFound, fmt.Errorf("ft: no snapshot of quorum %d at step %d here (yet)", q, step))
			return
		}
		h(w, req, s)
	}
}

func (r *recoveryServer) manifest(w http.ResponseWriter, req *http.Request, s *snapshot) {
	b, _ := json.Marshal(s.m) // a manifest always encodes
	ts := strconv.FormatInt(time.Now().UnixNano(), 10)
	w.Header().Set(headerTime, ts)
	w.Header().Set(headerSig, hex.EncodeToString(signature(r.secret, "RESPONSE", req.URL.Path, ts, b)))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (r *recoveryServer) chunkOf(w http.ResponseWriter, req *http.Request, s *snapshot) {
	i, err := strconv.Atoi(req.PathValue("chunk"))
	if err != nil || i < 0 || i >= len(s.m.Chunks) {
		httpError(w, http.StatusBadRequest, fmt.Errorf("ft: chunk %q of %d", req.PathValue("chunk"), len(s.m.Chunks)))
		return
	}
	off := i * s.m.ChunkBytes
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(s.data[off:min(off+s.m.ChunkBytes, len(s.data))])
}

// healing is a recovery in flight.
type healing struct {
	cancel context.CancelFunc
	done   chan struct{}
	step   int64
	chain  string // the source's commit chain
	src    string
	data   []byte
	err    error
	took   time.Duration
}

// serve publishes this replica's snapshot for the peers that heal from it.
func (m *Manager) serve(r Results) {
	data, err := m.o.State.Snapshot()
	if err != nil {
		m.fail(fmt.Errorf("ft: the snapshot for %d healing peers: %w", len(r.RecoverDstRanks), err))
		return
	}
	m.rec.put(r.QuorumID, m.step, data, m.o.Timeout)
	m.stats.Served++
	m.log.Info("serving a recovery", zap.Int64("quorum_id", r.QuorumID), zap.Int64("step", m.step),
		zap.Int("bytes", len(data)), zap.Ints("to_ranks", r.RecoverDstRanks))
}

// startHeal begins fetching the state at r.MaxStep from r's source.
func (m *Manager) startHeal(ctx context.Context, r Results) {
	hctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	h := &healing{cancel: cancel, done: make(chan struct{}), step: r.MaxStep, chain: r.CommitChain,
		src: r.RecoverSrcAddr}
	m.heal = h
	go func() {
		defer close(h.done)
		defer cancel()
		start := time.Now()
		c := &http.Client{Transport: &http.Transport{}}
		h.data, h.err = fetchSnapshot(hctx, c, m.o.Secret, r.RecoverSrcAddr, r.QuorumID, r.MaxStep)
		h.took = time.Since(start)
	}()
}

// finishHeal waits for the recovery in flight and restores its state.
func (m *Manager) finishHeal() {
	h := m.heal
	m.heal = nil
	<-h.done
	err := h.err
	if err == nil {
		err = m.o.State.Restore(h.step, h.data)
	}
	if err != nil {
		m.stats.FailedRecoveries++
		m.fail(fmt.Errorf("ft: recovering step %d from %s: %w", h.step, h.src, err))
		m.log.Warn("recovery failed", zap.Int64("step", h.step), zap.String("from", h.src), zap.Error(err))
		return
	}
	m.step, m.chain = h.step, h.chain
	m.stats.Recoveries++
	m.stats.RecoveredBytes += int64(len(h.data))
	m.stats.RecoveryTime += h.took
	m.met.recovered(len(h.data), h.took)
	m.log.Info("recovered", zap.Int64("step", h.step), zap.String("from", h.src), zap.Int("bytes", len(h.data)),
		zap.Duration("took", h.took))
}

// fetchSnapshot fetches and checks the snapshot of quorum q at step from
// the recovery server at addr.
func fetchSnapshot(ctx context.Context, c *http.Client, secret []byte, addr string, q, step int64) ([]byte, error) {
	defer c.CloseIdleConnections()
	base := "http://" + addr + pathRecovery + strconv.FormatInt(q, 10) + "/" + strconv.FormatInt(step, 10)
	var m manifest
	if err := retryNotFound(ctx, func() error { return getManifest(ctx, c, secret, base, &m) }); err != nil {
		return nil, err
	}
	if m.Bytes < 0 || m.ChunkBytes <= 0 || int64(len(m.Chunks)) != (m.Bytes+int64(m.ChunkBytes)-1)/int64(m.ChunkBytes) {
		return nil, fmt.Errorf("ft: a malformed recovery manifest: %d bytes in %d chunks of %d", m.Bytes, len(m.Chunks),
			m.ChunkBytes)
	}
	data := make([]byte, 0, m.Bytes)
	for i, want := range m.Chunks {
		var err error
		for try := 0; try < 3; try++ {
			var b []byte
			if b, err = getChunk(ctx, c, secret, base+"/"+strconv.Itoa(i)); err == nil {
				if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) == want {
					data = append(data, b...)
					break
				}
				err = fmt.Errorf("ft: recovery chunk %d of %d failed its SHA-256 check", i, len(m.Chunks))
			}
			if ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m.SHA256 {
		return nil, errors.New("ft: the recovered state failed its SHA-256 check")
	}
	return data, nil
}

// retryNotFound calls f until it succeeds, fails with anything but a 404
// (the source is up but has not reached the step yet), or ctx ends. A
// source that does not answer at all is dead: that fails at once.
func retryNotFound(ctx context.Context, f func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := f()
		var se *StatusError
		if !errors.As(err, &se) || se.Code != http.StatusNotFound {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ft: waiting for the recovery source: %w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func get(ctx context.Context, c *http.Client, secret []byte, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	sign(req, secret, time.Now(), nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(b))
		}
		return nil, &StatusError{Code: resp.StatusCode, Message: eb.Error}
	}
	return resp, nil
}

func getManifest(ctx context.Context, c *http.Client, secret []byte, url string, m *manifest) error {
	resp, err := get(ctx, c, secret, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	sig, _ := hex.DecodeString(resp.Header.Get(headerSig))
	want := signature(secret, "RESPONSE", resp.Request.URL.Path, resp.Header.Get(headerTime), b)
	if len(sig) == 0 || !hmac.Equal(sig, want) {
		return errors.New("ft: the recovery manifest is not signed with the job's secret")
	}
	return json.Unmarshal(b, m)
}

func getChunk(ctx context.Context, c *http.Client, secret []byte, url string) ([]byte, error) {
	resp, err := get(ctx, c, secret, url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
