package netbed

import (
	"context"
	"testing"
	"time"
)

// SkipUnless skips t unless enabled (the test's own gate: the tests read
// GODDP_TEST_NETBED, no library does) and this machine can build a bed
// (Available: root, iproute2, util-linux).
func SkipUnless(t testing.TB, enabled bool) {
	t.Helper()
	if !enabled {
		t.Skip("set GODDP_TEST_NETBED=1 (as root) to run the network-namespace tests")
	}
	if err := Available(); err != nil {
		t.Skip(err)
	}
}

// ForTest is New for a test, after SkipUnless: a bed of o.Hosts hosts,
// built within a minute (o.Logf defaults to t.Logf), closed when the test
// ends, a failed Close reported as the test's error. A test that must
// stop what runs on the hosts before its own clean-up can call Close
// itself first; a second Close does nothing.
func ForTest(t testing.TB, enabled bool, o Options) *Bed {
	t.Helper()
	SkipUnless(t, enabled)
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}
