package pg_test

import (
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// TestOpTypesAreNamed holds OpTypes and String together: OpTypes lists
// every collective, 1 to N with no gap, and each has a name of its own,
// the one errors, logs and metric labels carry; past the list there is
// no name.
func TestOpTypesAreNamed(t *testing.T) {
	ops := pg.OpTypes()
	seen := map[string]pg.OpType{}
	for i, o := range ops {
		if o != pg.OpType(i+1) {
			t.Fatalf("OpTypes()[%d] = %d; want the OpTypes numbered 1 to %d in order", i, uint8(o), len(ops))
		}
		name := o.String()
		if strings.HasPrefix(name, "OpType(") {
			t.Errorf("OpType %d has no name", uint8(o))
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("OpTypes %d and %d are both %q", uint8(prev), uint8(o), name)
		}
		seen[name] = o
	}
	if past := pg.OpType(len(ops) + 1); !strings.HasPrefix(past.String(), "OpType(") {
		t.Errorf("OpType %d is named %q but OpTypes leaves it out", uint8(past), past)
	}
}
