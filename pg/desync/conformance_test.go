package desync

import (
	"flag"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest"
	"github.com/goddp/ddp/pg/store"
)

var conformance = flag.Bool("conformance", false, "run the pgtest conformance suite through the wrapper")

// The wrapper is a process group like any other: the conformance suite,
// faults and subgroups included, passes through it over pg/local.
func TestConformanceThroughTheWrapper(t *testing.T) {
	if !*conformance {
		t.Skip("run with -conformance (the suite runs in every backend's own tests)")
	}
	for _, check := range []bool{false, true} {
		t.Run(map[bool]string{false: "diagnosis", true: "checked"}[check], func(t *testing.T) { conform(t, check) })
	}
}

func conform(t *testing.T, check bool) { pgtest.Run(t, wrappedWorld(check)) }

// wrappedWorld is the pgtest.World of wrapped pg/local groups.
func wrappedWorld(check bool) pgtest.World {
	return func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		groups, err := local.New(n, local.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		st := store.NewHashStore(store.HashStoreOptions{})
		t.Cleanup(func() { st.Close() })
		out := make([]pg.ProcessGroup, n)
		for r, g := range groups {
			if out[r], err = Wrap(g, st,
				Options{DiagnosisTimeout: 200 * time.Millisecond, StoreHost: pg.NoPeer, CheckCollectives: check}); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
}

// Bad calls (pgtest.RunMisuse) fail through the wrapper as through the
// group it wraps, with and without the check, and run by default.
func TestMisuseThroughTheWrapper(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(map[bool]string{false: "diagnosis", true: "checked"}[check], func(t *testing.T) {
			pgtest.RunMisuse(t, wrappedWorld(check))
		})
	}
}
