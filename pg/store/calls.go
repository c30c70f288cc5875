package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// Set implements Store.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	_, err := c.roundTrip(ctx, request{op: opSet, keys: []string{key}, value: value})
	return err
}

// Get implements Store. The server parks the request until key is set; the
// client bounds the wait by ctx, or by its timeout when ctx has no deadline.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	return c.roundTrip(ctx, request{op: opGet, keys: []string{key}})
}

// Add implements Store.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	body, err := c.roundTrip(ctx, request{op: opAdd, keys: []string{key}, delta: delta})
	n, err := decodeUint(body, err)
	return int64(n), err
}

// CompareSet implements Store.
func (c *Client) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	return c.roundTrip(ctx, request{op: opCompareSet, keys: []string{key}, value: expected, desired: desired})
}

// Wait implements Store.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	_, err := c.roundTrip(ctx, request{op: opWait, keys: keys})
	return err
}

// Delete implements Store.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	body, err := c.roundTrip(ctx, request{op: opDelete, keys: []string{key}})
	n, err := decodeUint(body, err)
	return n == 1, err
}

// NumKeys implements Store.
func (c *Client) NumKeys(ctx context.Context) (int64, error) {
	body, err := c.roundTrip(ctx, request{op: opNumKeys})
	n, err := decodeUint(body, err)
	return int64(n), err
}

func decodeUint(body []byte, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	d := wire.NewDecoder(body)
	n := d.Uint64()
	if err := d.Finish(); err != nil {
		return 0, fmt.Errorf("store: bad response: %w", err)
	}
	return n, nil
}

// roundTrip sends req on a borrowed connection and returns the OK payload.
// The connection's deadline is ctx's (or the client timeout's), and ending
// ctx interrupts the exchange. A connection whose exchange failed or was
// interrupted is closed, never reused.
func (c *Client) roundTrip(ctx context.Context, req request) ([]byte, error) {
	ctx, cancel := bound(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	deadline, _ := ctx.Deadline()
	req.wait = max(time.Until(deadline), 0)
	payload := req.appendPayload(nil)
	if len(payload) > int(c.maxFrame) {
		return nil, fmt.Errorf("%w: store: %v request of %d bytes exceeds the frame cap of %d", pg.ErrInvalidArgument, req.op,
			len(payload), c.maxFrame)
	}
	conn, err := c.pool.take(ctx)
	if err != nil {
		return nil, c.callErr(ctx, req, start, err)
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(longAgo) })
	status, body, err := c.exchange(conn, req.op, payload)
	c.pool.give(conn, stop() && err == nil && status != statusBadRequest)
	if err != nil {
		return nil, c.callErr(ctx, req, start, err)
	}
	return c.result(req, status, body, start)
}

// exchange writes one request frame and reads its response.
func (c *Client) exchange(conn net.Conn, o op, payload []byte) (status uint8, body []byte, err error) {
	seq := c.seq.Add(1)
	if err := wire.WriteFrame(conn, wire.Header{Kind: uint8(o), Seq: seq}, payload); err != nil {
		return 0, nil, err
	}
	var hb [wire.HeaderSize]byte
	h, err := wire.ReadHeader(conn, &hb, c.maxFrame)
	if err != nil {
		return 0, nil, err
	}
	body, err = readFrame(conn, int(h.Len), unlimited) // as it arrives: h.Len is the server's claim
	if err != nil {
		return 0, nil, err
	}
	if h.Seq != seq {
		return 0, nil, fmt.Errorf("%w: response to request %d arrived for request %d", pg.ErrComm, h.Seq, seq)
	}
	return h.Kind, body, nil
}

// result turns a response into the call's result.
func (c *Client) result(req request, status uint8, body []byte, start time.Time) ([]byte, error) {
	switch status {
	case statusOK:
		return body, nil
	case statusTimeout:
		return nil, &TimeoutError{Op: req.op.String(), Keys: req.keys, After: time.Since(start)}
	case statusInvalid:
		return nil, fmt.Errorf("%w: %s (from the store server at %s)", pg.ErrInvalidArgument, body, c.addr)
	case statusBadRequest:
		return nil, fmt.Errorf("%w: the store server at %s refused a %v request as malformed: %s", pg.ErrComm, c.addr, req.op,
			body)
	default:
		return nil, fmt.Errorf("%w: store server at %s: %v: %s", pg.ErrRemote, c.addr, req.op, truncate(body))
	}
}

// callErr explains a failed exchange: the client was closed, ctx ended
// (a timeout names the keys of a get or wait), or the connection broke.
func (c *Client) callErr(ctx context.Context, req request, start time.Time, err error) error {
	switch {
	case c.pool.isClosed():
		return ErrClosed
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("store: %v %q: %w", req.op, req.keys, context.Cause(ctx))
	case ctx.Err() != nil || errors.Is(err, errDeadline):
		if req.blocks() {
			return &TimeoutError{Op: req.op.String(), Keys: req.keys, After: time.Since(start)}
		}
		return fmt.Errorf("%w: store: %v %q: no answer from %s within %v", pg.ErrTimeout, req.op, req.keys, c.addr,
			time.Since(start).Round(time.Millisecond))
	case errors.Is(err, pg.ErrComm), errors.Is(err, pg.ErrUnauthenticated):
		return fmt.Errorf("store: %v %q: %w", req.op, req.keys, err)
	default:
		return fmt.Errorf("%w: store: %v %q: connection to %s: %w", pg.ErrComm, req.op, req.keys, c.addr, err)
	}
}
