package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
)

// C10dProtocol is a generation of c10d's TCPStore wire protocol.
type C10dProtocol int

const (
	// C10dAuto detects the server's protocol when the client connects.
	C10dAuto C10dProtocol = iota
	// C10dV1 is the protocol of PyTorch 1.x (1.13, Debian's python3-torch):
	// no opening handshake, SET is query type 0.
	C10dV1
	// C10dV2 is today's protocol (PyTorch 2.x): every connection opens with
	// a VALIDATE query and a magic number, and the query types are shifted
	// by one.
	C10dV2
)

func (p C10dProtocol) String() string {
	switch p {
	case C10dAuto:
		return "auto"
	case C10dV1:
		return "1.x"
	case C10dV2:
		return "2.x"
	}
	return fmt.Sprintf("C10dProtocol(%d)", int(p))
}

// C10dOptions configure DialC10d.
type C10dOptions struct {
	// Protocol is the server's protocol generation; C10dAuto (the zero
	// value) detects it. A wrong choice is not detected: the server drops
	// the connection or ignores the queries, so calls fail, at worst when
	// their timeout ends.
	Protocol C10dProtocol
	// Timeout bounds every call whose ctx has no deadline, and DialC10d's
	// wait for the server; zero means DefaultTimeout.
	Timeout time.Duration
	// MaxValue caps the size of a value the server sends back; zero means
	// 64 MiB.
	MaxValue int
	// RawKeys sends keys as they are. By default the client puts "/"
	// before every key on the wire, as torch's own TCPStore client does,
	// so that key "k" here is key "k" for torch.distributed.TCPStore too.
	RawKeys bool
	// Logger receives dial retries and the detected protocol; nil means
	// none.
	Logger *zap.Logger
}

// C10dClient is a Store backed by a c10d TCPStore server, such as the one
// torchrun's agent serves at MASTER_ADDR:MASTER_PORT, or any
// torch.distributed.TCPStore with is_master=True. It speaks the server's
// own wire protocol, 1.x or 2.x.
//
// The c10d protocol has no authentication: anyone who can reach the
// server can read and write every key. Keep secrets out of it.
//
// It is safe for concurrent use: each call borrows a connection from a
// small pool or opens one, so a Get parked on the server never delays
// another caller's Set. A call whose ctx ends closes its connection, which
// also withdraws a parked wait from the server.
type C10dClient struct {
	addr     string
	proto    C10dProtocol
	timeout  time.Duration
	maxValue uint64
	prefix   string // "/" as torch's client, or "" with RawKeys
	log      *zap.Logger

	pool connPool
}

var _ Store = (*C10dClient)(nil)

// DialC10d connects to the c10d TCPStore server at addr (host:port),
// retrying with backoff while nothing listens there, until ctx ends or
// opts.Timeout passes. With C10dAuto it detects the protocol first: it
// opens with 2.x's VALIDATE followed by queries that a 2.x server answers
// and a 1.x server rejects at once (it reads them as a SET whose key
// length exceeds 2^63 and drops the connection, storing nothing).
func DialC10d(ctx context.Context, addr string, opts C10dOptions) (*C10dClient, error) {
	if opts.Protocol < C10dAuto || opts.Protocol > C10dV2 {
		return nil, fmt.Errorf("%w: store: c10d protocol %v; use C10dAuto, C10dV1 or C10dV2", pg.ErrInvalidArgument,
			opts.Protocol)
	}
	if opts.MaxValue < 0 {
		return nil, fmt.Errorf("%w: store: C10dOptions.MaxValue %d is negative", pg.ErrInvalidArgument, opts.MaxValue)
	}
	c := &C10dClient{
		addr:     addr,
		proto:    opts.Protocol,
		timeout:  orDefault(opts.Timeout),
		maxValue: defaultC10dMaxVal,
		prefix:   "/",
		log:      orNop(opts.Logger),
	}
	if opts.MaxValue > 0 {
		c.maxValue = uint64(opts.MaxValue)
	}
	if opts.RawKeys {
		c.prefix = ""
	}
	ctx, cancel := bound(ctx, c.timeout)
	defer cancel()
	conn, err := c.dialRetry(ctx)
	if err != nil {
		return nil, err
	}
	c.pool = newConnPool(conn, c.dialOnce)
	c.log.Debug("store: connected to a c10d TCPStore", zap.String("addr", addr), zap.Stringer("protocol", c.proto))
	return c, nil
}

// Addr returns the server address the client dials.
func (c *C10dClient) Addr() string { return c.addr }

// Protocol returns the protocol the client speaks: the one in its options,
// or the one it detected.
func (c *C10dClient) Protocol() C10dProtocol { return c.proto }

// Close closes every connection; calls in flight fail with ErrClosed. The
// server and its keys stay. Close is idempotent.
func (c *C10dClient) Close() error {
	c.pool.close()
	return nil
}

// dialRetry opens the first connection, detecting the protocol if asked,
// and retries while the server is not listening yet.
func (c *C10dClient) dialRetry(ctx context.Context) (net.Conn, error) {
	start := time.Now()
	backoff := 10 * time.Millisecond
	for {
		conn, err := c.dialFirst(ctx)
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
			if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: store: no c10d TCPStore answered at %s within %v: %w", pg.ErrTimeout, c.addr,
					time.Since(start).Round(time.Millisecond), err)
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("store: dial c10d TCPStore at %s: %w", c.addr, context.Cause(ctx))
			}
			return nil, err
		}
		c.log.Debug("store: c10d TCPStore not reachable yet; retrying", zap.String("addr", c.addr), zap.Error(err),
			zap.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-ctx.Done():
		}
	}
}

// dialFirst opens the first connection; with C10dAuto it settles c.proto.
func (c *C10dClient) dialFirst(ctx context.Context) (net.Conn, error) {
	if c.proto != C10dAuto {
		return c.dialOnce(ctx)
	}
	conn, v2, err := c.probe(ctx)
	if err != nil {
		return nil, err
	}
	if v2 {
		c.proto = C10dV2
		return conn, nil
	}
	// The server dropped the 2.x opening: confirm 1.x with a query it must
	// answer.
	c.proto = C10dV1
	conn, err = c.dialOnce(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.do(ctx, conn, c10dRequest{op: c10dNumKeys}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: store: the server at %s dropped the c10d 2.x opening (VALIDATE) and does not answer a "+
			"1.x query either (%v); is it a c10d TCPStore? (set C10dOptions.Protocol to skip detection)", pg.ErrComm, c.addr,
			err)
	}
	return conn, nil
}

// probeKeys is how many keys the probe's CHECK names: 128, so that the
// length a 1.x server reads from the probe's bytes 1 to 8 has its top bit
// set (byte 8 is the low byte of the key count).
const probeKeys = 0x80

// probe sends 2.x's opening followed by GETNUMKEYS, GETNUMKEYS and a CHECK
// of probeKeys empty keys. A 2.x server answers 17 bytes and the
// connection stays usable. A 1.x server reads query type 0 as SET and
// bytes 1 to 8 as the key's length, 0x80...; allocating that throws, and
// the server closes the connection having stored nothing.
func (c *C10dClient) probe(ctx context.Context) (net.Conn, bool, error) {
	conn, err := new(net.Dialer).DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	b := c10dProbe()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(longAgo) })
	defer stop()
	_, werr := conn.Write(b)
	d := c10dDecoder{r: conn, max: c.maxValue}
	n1, err := d.int64()
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if werr != nil || dropped(err) {
			return nil, false, nil // 1.x
		}
		return nil, false, fmt.Errorf("%w: store: detecting the c10d protocol of %s: %w", pg.ErrComm, c.addr, err)
	}
	n2, err := d.int64()
	if err == nil {
		_, err = d.readAnswer(c10dCheck)
	}
	if err == nil && (n1 < 0 || n2 < 0) {
		err = fmt.Errorf("%w: negative key counts %d, %d", pg.ErrComm, n1, n2)
	}
	if err != nil {
		conn.Close()
		return nil, false, fmt.Errorf(
			"%w: store: the server at %s answered the c10d 2.x opening with unexpected bytes; is it a c10d TCPStore? %w",
			pg.ErrComm, c.addr, err)
	}
	if !stop() {
		conn.Close()
		return nil, false, ctx.Err()
	}
	conn.SetDeadline(time.Time{})
	return conn, true, nil
}

// c10dProbe returns the bytes probe sends.
func c10dProbe() []byte {
	b := appendC10dValidate(nil)
	b = append(b, c10dCodes[C10dV2][c10dNumKeys], c10dCodes[C10dV2][c10dNumKeys], c10dCodes[C10dV2][c10dCheck])
	b = binary.LittleEndian.AppendUint64(b, probeKeys)
	for range probeKeys {
		b = appendC10dString(b, "")
	}
	return b
}

// dropped reports whether err is the peer closing or resetting the
// connection.
func dropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// dialOnce opens one connection in c.proto, with 2.x's opening.
func (c *C10dClient) dialOnce(ctx context.Context) (net.Conn, error) {
	conn, err := new(net.Dialer).DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	if c.proto == C10dV2 {
		// The server does not answer VALIDATE; it goes out with the first
		// query's bytes.
		if d, ok := ctx.Deadline(); ok {
			conn.SetWriteDeadline(d)
		}
		if _, err := conn.Write(appendC10dValidate(nil)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("store: opening a connection to the c10d TCPStore at %s: %w", c.addr, err)
		}
		conn.SetWriteDeadline(time.Time{})
	}
	return conn, nil
}

// do sends the requests on conn one after the other, each after the
// previous answer, and returns the last answer. The connection's deadline
// is ctx's; ending ctx interrupts the exchange.
func (c *C10dClient) do(ctx context.Context, conn net.Conn, reqs ...c10dRequest) (c10dAnswer, error) {
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(longAgo) })
	d := c10dDecoder{r: conn, max: c.maxValue}
	var a c10dAnswer
	var err error
	for _, r := range reqs {
		if _, err = conn.Write(appendC10dRequest(nil, c.proto, r)); err != nil {
			break
		}
		if a, err = d.readAnswer(r.op); err != nil {
			break
		}
	}
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	return a, err
}

// call runs one logical store call: reqs on one borrowed connection.
func (c *C10dClient) call(ctx context.Context, name string, keys []string, reqs ...c10dRequest) (c10dAnswer, error) {
	for _, r := range reqs {
		if err := checkC10dRequest(r); err != nil {
			return c10dAnswer{}, err
		}
	}
	ctx, cancel := bound(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	conn, err := c.pool.take(ctx)
	if err != nil {
		return c10dAnswer{}, c.callErr(ctx, name, keys, start, err)
	}
	a, err := c.do(ctx, conn, reqs...)
	c.pool.give(conn, err == nil)
	if err != nil {
		return c10dAnswer{}, c.callErr(ctx, name, keys, start, err)
	}
	return a, nil
}

// callErr explains a failed call: the client was closed, ctx ended (a
// timeout of a get or wait names its keys), or the connection broke.
func (c *C10dClient) callErr(ctx context.Context, name string, keys []string, start time.Time, err error) error {
	switch {
	case c.pool.isClosed():
		return ErrClosed
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("store: c10d %s %q: %w", name, keys, context.Cause(ctx))
	case ctx.Err() != nil || errors.Is(err, errDeadline):
		if name == "get" || name == "wait" {
			return &TimeoutError{Op: name, Keys: keys, After: time.Since(start)}
		}
		return fmt.Errorf("%w: store: c10d %s %q: no answer from %s within %v", pg.ErrTimeout, name, keys, c.addr,
			time.Since(start).Round(time.Millisecond))
	case errors.Is(err, pg.ErrComm), errors.Is(err, pg.ErrInvalidArgument):
		return fmt.Errorf("store: c10d %s %q at %s: %w", name, keys, c.addr, err)
	case dropped(err):
		return fmt.Errorf("%w: store: c10d %s %q: the TCPStore at %s (protocol %v) closed the connection: %w", pg.ErrComm,
			name, keys, c.addr, c.proto, err)
	default:
		return fmt.Errorf("%w: store: c10d %s %q: connection to %s: %w", pg.ErrComm, name, keys, c.addr, err)
	}
}

// wire returns keys as they go on the wire.
func (c *C10dClient) wire(keys ...string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = c.prefix + k
	}
	return out
}

// Set implements Store. The protocol does not acknowledge a set, so the
// client follows it with a GETNUMKEYS on the same connection: Set returns
// once the server has applied it, and a later call on any connection sees
// the value.
func (c *C10dClient) Set(ctx context.Context, key string, value []byte) error {
	_, err := c.call(ctx, "set", []string{key},
		c10dRequest{op: c10dSet, keys: c.wire(key), value: value},
		c10dRequest{op: c10dNumKeys})
	return err
}

// Get implements Store: a WAIT for key, then a GET, as c10d's own client
// does (a c10d server drops a connection that gets a missing key).
func (c *C10dClient) Get(ctx context.Context, key string) ([]byte, error) {
	keys := []string{key}
	a, err := c.call(ctx, "get", keys,
		c10dRequest{op: c10dWait, keys: c.wire(key)},
		c10dRequest{op: c10dGet, keys: c.wire(key)})
	return a.value, err
}

// Add implements Store. A c10d server drops the connection when the key
// holds something that is not a decimal integer; the client then reads
// the key to tell that apart from a broken connection.
func (c *C10dClient) Add(ctx context.Context, key string, delta int64) (int64, error) {
	a, err := c.call(ctx, "add", []string{key}, c10dRequest{op: c10dAdd, keys: c.wire(key), delta: delta})
	if err != nil && errors.Is(err, pg.ErrComm) && ctx.Err() == nil && !c.pool.isClosed() {
		if v, gerr := c.peek(ctx, key); gerr == nil && v != nil {
			if _, perr := strconv.ParseInt(string(v), 10, 64); perr != nil {
				return 0, fmt.Errorf(
					"%w: store: c10d add to key %q: value %q is not a decimal integer (the server dropped the connection)",
					pg.ErrInvalidArgument, key, truncate(v))
			}
		}
	}
	return a.n, err
}

// peek returns key's value, or nil if it is absent, without waiting.
func (c *C10dClient) peek(ctx context.Context, key string) ([]byte, error) {
	ok, err := c.Check(ctx, key)
	if err != nil || !ok {
		return nil, err
	}
	a, err := c.call(ctx, "get", []string{key}, c10dRequest{op: c10dGet, keys: c.wire(key)})
	return a.value, err
}

// CompareSet implements Store.
func (c *C10dClient) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	a, err := c.call(ctx, "compareSet", []string{key},
		c10dRequest{op: c10dCompareSet, keys: c.wire(key), value: expected, desired: desired})
	if err == nil && a.value == nil {
		a.value = []byte{}
	}
	return a.value, err
}

// Wait implements Store.
func (c *C10dClient) Wait(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		if c.pool.isClosed() {
			return ErrClosed
		}
		return nil
	}
	_, err := c.call(ctx, "wait", keys, c10dRequest{op: c10dWait, keys: c.wire(keys...)})
	return err
}

// Check reports whether every key exists, without waiting (c10d's check).
func (c *C10dClient) Check(ctx context.Context, keys ...string) (bool, error) {
	if len(keys) == 0 {
		if c.pool.isClosed() {
			return false, ErrClosed
		}
		return true, nil
	}
	a, err := c.call(ctx, "check", keys, c10dRequest{op: c10dCheck, keys: c.wire(keys...)})
	return a.ready, err
}

// Delete implements Store.
func (c *C10dClient) Delete(ctx context.Context, key string) (bool, error) {
	a, err := c.call(ctx, "delete", []string{key}, c10dRequest{op: c10dDelete, keys: c.wire(key)})
	return a.n == 1, err
}

// NumKeys implements Store. It counts every key on the server, torch's
// and torchrun's included.
func (c *C10dClient) NumKeys(ctx context.Context) (int64, error) {
	a, err := c.call(ctx, "numKeys", nil, c10dRequest{op: c10dNumKeys})
	return a.n, err
}
