package ft

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client is one replica group's connection to a lighthouse Server.
// Every call is bounded by its context and retries, with backoff, what a
// lighthouse that is down or restarting answers (no connection, a reset,
// a 5xx), so a restarted Server is re-registered with; what can never
// succeed (a refused secret, a bad request) fails at once.
type Client struct {
	base      string
	secret    []byte
	replicaID string
	http      *http.Client
	opt       ClientOptions
}

// ClientOptions tune a Client's retries; the zero value takes the
// defaults.
type ClientOptions struct {
	MinBackoff time.Duration // the first wait after a failure; default 50ms
	MaxBackoff time.Duration // the longest, as it doubles; default 1s
}

// StatusError is a lighthouse's refusal: its HTTP status and message.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("ft: lighthouse answered %d: %s", e.Code, e.Message)
}

// NewClient returns replicaID's client of the Server at addr (host:port
// or an http:// URL), signing with secret.
func NewClient(addr string, secret []byte, replicaID string, opt ClientOptions) (*Client, error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	if replicaID == "" {
		return nil, errors.New("ft: a client needs a replica id")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = 50 * time.Millisecond
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(time.Second, opt.MinBackoff)
	}
	return &Client{base: strings.TrimRight(addr, "/"), secret: append([]byte(nil), secret...), replicaID: replicaID,
		http: &http.Client{Transport: &http.Transport{}}, opt: opt}, nil
}

// Heartbeat tells the lighthouse the replica is alive.
func (c *Client) Heartbeat(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, PathHeartbeat, heartbeatRequest{ReplicaID: c.replicaID}, nil)
}

// DefaultHeartbeatInterval is how often a torchft Manager heartbeats
// (torchft/manager.py, heartbeat_interval): well inside
// DefaultHeartbeatTimeout.
const DefaultHeartbeatInterval = 100 * time.Millisecond

// Heartbeats sends a heartbeat every interval until ctx ends, and
// returns ctx's error (or the first that retrying cannot mend).
func (c *Client) Heartbeats(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := c.Heartbeat(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Quorum asks for the next quorum for m (its ReplicaID the client's, or
// empty for it) and waits for it.
func (c *Client) Quorum(ctx context.Context, m Member) (Quorum, error) {
	if m.ReplicaID == "" {
		m.ReplicaID = c.replicaID
	}
	if m.ReplicaID != c.replicaID {
		return Quorum{}, fmt.Errorf("ft: client of replica %q asked for %q", c.replicaID, m.ReplicaID)
	}
	var q Quorum
	err := c.call(ctx, http.MethodPost, PathQuorum, m, &q)
	return q, err
}

// Status returns the lighthouse's Status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.call(ctx, http.MethodGet, PathStatus, nil, &st)
	return st, err
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// call does one request, retrying until it succeeds, fails for good or
// ctx ends.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	wait := c.opt.MinBackoff
	for {
		err := c.once(ctx, method, path, body, out)
		var se *StatusError
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("ft: %s %s: %w (last: %v)", method, path, ctx.Err(), err)
		case errors.As(err, &se) && se.Code < 500:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ft: %s %s: %w (last: %v)", method, path, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, c.opt.MaxBackoff)
	}
}

// once does one request.
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	sign(req, c.secret, time.Now(), body)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(b))
		}
		return &StatusError{Code: resp.StatusCode, Message: eb.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
