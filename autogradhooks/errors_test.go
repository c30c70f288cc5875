package autogradhooks

import (
	"errors"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
)

var errBoom = errors.New("boom: link to rank 1 failed")

// TestHookErrorAbortsRunAll makes the hook of b3 fail. RunAll must stop
// there and return an error that wraps the Func's, the process must go on,
// and the machine must run normally after Reset.
func TestHookErrorAbortsRunAll(t *testing.T) {
	const failAt = 5 // b3
	var fired []int
	fail := true
	m := buildMLP[float64](t, atUse, func(i int, _ G.Value) error {
		fired = append(fired, i)
		if fail && i == failAt {
			return errBoom
		}
		return nil
	})
	vm := G.NewTapeMachine(m.g)
	defer vm.Close()

	err := RunAll(vm)
	if !errors.Is(err, errBoom) {
		t.Fatalf("RunAll = %v, want an error wrapping %v", err, errBoom)
	}
	var he *HookError
	if !errors.As(err, &he) || he.Index != failAt || he.Param != "b3" {
		t.Fatalf("RunAll = %v, want a *HookError for parameter %d (b3)", err, failAt)
	}
	if want := []int{7, 6, 5}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v: the tape must stop at the failing hook", fired, want)
	}

	// Gorgonia's own error hides the chain; RunAll exists for that.
	vm.Reset()
	raw := vm.RunAll()
	if raw == nil || !strings.Contains(raw.Error(), errBoom.Error()) {
		t.Fatalf("vm.RunAll = %v, want it to mention %q", raw, errBoom)
	}
	if errors.Is(raw, errBoom) {
		t.Log("Gorgonia's VM error now unwraps; RunAll's wrapper is no longer needed")
	}

	vm.Reset()
	fail, fired = false, nil
	if err := RunAll(vm); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if len(fired) != len(m.params) {
		t.Fatalf("after Reset: fired %v, want all %d hooks", fired, len(m.params))
	}
}

// TestHookPanicBecomesError: a panic on RunAll's goroutine would kill the
// process, so the hook op recovers it and returns it as an error.
func TestHookPanicBecomesError(t *testing.T) {
	panicking := true
	m := buildMLP[float32](t, atUse, func(i int, _ G.Value) error {
		if panicking && i == 6 {
			panic("hook bug")
		}
		return nil
	})
	vm := G.NewTapeMachine(m.g)
	defer vm.Close()
	err := RunAll(vm)
	var he *HookError
	if !errors.Is(err, ErrHookPanic) || !errors.As(err, &he) || he.Index != 6 ||
		!strings.Contains(err.Error(), "hook bug") {
		t.Fatalf("RunAll = %v, want a HookError for parameter 6 wrapping ErrHookPanic and naming the panic value", err)
	}
	vm.Reset()
	panicking = false
	if err := RunAll(vm); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
}

func TestRunAllPassesOtherErrorsThrough(t *testing.T) {
	want := errors.New("plain")
	if err := RunAll(failingVM{want}); err != want {
		t.Fatalf("RunAll = %v, want the VM's error unchanged", err)
	}
	if err := RunAll(failingVM{}); err != nil {
		t.Fatalf("RunAll = %v, want nil", err)
	}
}

// failingVM is a VM whose RunAll returns a fixed error.
type failingVM struct{ err error }

func (v failingVM) RunAll() error { return v.err }
func (v failingVM) Reset()        {}
func (v failingVM) Close() error  { return nil }
