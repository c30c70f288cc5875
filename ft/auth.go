package ft

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// MinSecret is the shortest secret a Server or Client takes, in bytes:
// the module's rule for GODDP_SECRET (pg/env).
const MinSecret = 16

// maxSkew is how far a request's timestamp may be from the server's
// clock; a captured request replays for at most this long.
const maxSkew = 5 * time.Minute

// The headers that authenticate a request.
const (
	headerTime = "X-Goddp-Time"      // the client's clock, Unix nanoseconds
	headerSig  = "X-Goddp-Signature" // hex HMAC-SHA256 of the method, path, time and body
)

// DecodeSecret reads a GODDP_SECRET value by the module's rule (pg/env):
// hex that decodes to at least MinSecret bytes is decoded, anything else
// is taken as it is; it fails for a secret shorter than MinSecret.
func DecodeSecret(v string) ([]byte, error) {
	if b, err := hex.DecodeString(v); err == nil && len(b) >= MinSecret {
		return b, nil
	}
	if len(v) < MinSecret {
		return nil, fmt.Errorf("ft: the secret is %d bytes; it must be at least %d (e.g. "+
			"GODDP_SECRET=$(openssl rand -hex 32))", len(v), MinSecret)
	}
	return []byte(v), nil
}

func checkSecret(secret []byte) error {
	if len(secret) < MinSecret {
		return fmt.Errorf("ft: the secret is %d bytes; it must be at least %d", len(secret), MinSecret)
	}
	return nil
}

// signature is the HMAC of one request.
func signature(secret []byte, method, path, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	sum := sha256.Sum256(body)
	fmt.Fprintf(h, "%s\n%s\n%s\n%x", method, path, ts, sum)
	return h.Sum(nil)
}

// sign sets r's authentication headers.
func sign(r *http.Request, secret []byte, now time.Time, body []byte) {
	ts := strconv.FormatInt(now.UnixNano(), 10)
	r.Header.Set(headerTime, ts)
	r.Header.Set(headerSig, hex.EncodeToString(signature(secret, r.Method, r.URL.Path, ts, body)))
}

// errUnauthenticated is the answer to a request not signed with the secret.
var errUnauthenticated = errors.New("request not authenticated: missing or wrong " + headerSig +
	" (is GODDP_SECRET the lighthouse's?) or a clock more than 5m off")

// verify checks r's headers against secret and body, in constant time.
func verify(r *http.Request, secret []byte, now time.Time, body []byte) error {
	ts := r.Header.Get(headerTime)
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errUnauthenticated
	}
	if d := now.Sub(time.Unix(0, n)); d > maxSkew || d < -maxSkew {
		return errUnauthenticated
	}
	got, err := hex.DecodeString(r.Header.Get(headerSig))
	if err != nil || !hmac.Equal(got, signature(secret, r.Method, r.URL.Path, ts, body)) {
		return errUnauthenticated
	}
	return nil
}
