package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
)

// DefaultTimeout bounds every blocking call whose ctx has no deadline when
// the store's options leave Timeout zero: 300 s, c10d's
// Store::kDefaultTimeout.
const DefaultTimeout = 300 * time.Second

// TimeoutError reports keys that were not set in time, like c10d's "Wait
// timeout" error. It wraps pg.ErrTimeout.
type TimeoutError struct {
	Op    string        // "get" or "wait"
	Keys  []string      // the keys waited for
	After time.Duration // how long the call waited
}

func (e *TimeoutError) Error() string {
	quoted := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		quoted[i] = strconv.Quote(k)
	}
	return fmt.Sprintf("store: %s: wait timeout after %v, keys: %s",
		e.Op, e.After.Round(time.Millisecond), strings.Join(quoted, ", "))
}

// Unwrap makes errors.Is(err, pg.ErrTimeout) true.
func (e *TimeoutError) Unwrap() error { return pg.ErrTimeout }

// bound returns ctx limited to timeout from now, unless ctx already has a
// deadline, which then wins.
func bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// orDefault returns d, or DefaultTimeout if d is not positive.
func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTimeout
	}
	return d
}

// waitErr is the error of a wait for keys that ended because ctx did: a
// *TimeoutError for a deadline, the cancellation cause otherwise.
func waitErr(ctx context.Context, op string, keys []string, start time.Time) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &TimeoutError{Op: op, Keys: keys, After: time.Since(start)}
	}
	return fmt.Errorf("store: %s %q: %w", op, keys, context.Cause(ctx))
}

// addDecimal adds delta to the decimal integer old (0 when absent) and
// returns the sum and its text, as c10d's add stores it.
func addDecimal(key string, old []byte, present bool, delta int64) (int64, []byte, error) {
	var cur int64
	if present && len(old) > 0 {
		v, err := strconv.ParseInt(string(old), 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: store: add to key %q: value %q is not a decimal integer", pg.ErrInvalidArgument, key,
				truncate(old))
		}
		cur = v
	}
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		return 0, nil, fmt.Errorf("%w: store: add %d to key %q (now %d) overflows int64", pg.ErrInvalidArgument, delta, key,
			cur)
	}
	sum := cur + delta
	return sum, strconv.AppendInt(nil, sum, 10), nil
}

// compareSet decides c10d's compareSet: it reports whether to store
// desired, and the value the call returns.
func compareSet(cur []byte, present bool, expected, desired []byte) (result []byte, swap bool) {
	switch {
	case !present && len(expected) == 0, present && string(cur) == string(expected):
		return desired, true
	case !present:
		return expected, false
	default:
		return cur, false
	}
}

// clone copies b, keeping nil-ness out of results: a stored empty value
// comes back as a non-nil empty slice.
func clone(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

// truncate shortens a value for an error message.
func truncate(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
