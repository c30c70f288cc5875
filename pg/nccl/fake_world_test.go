package nccl

import (
	"testing"
	"time"
)

// fakeWorld makes n ranks of Groups over fake backends over one pg/local
// world, with a shared HashStore for MonitoredBarrier.
func fakeWorld(t testing.TB, n int, timeout time.Duration) ([]*Group, []*fakeBackend) {
	t.Helper()
	gs, bs, cleanup, err := newFakeWorld(n, FakeOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return gs, bs
}
