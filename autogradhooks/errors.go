package autogradhooks

import (
	"errors"
	"fmt"

	"gorgonia.org/gorgonia"
)

// ErrHookPanic is wrapped by the HookError of a Func that panicked. The
// panic is recovered inside the hook op, because RunAll runs the tape on its
// own goroutine, where a panic would kill the process.
var ErrHookPanic = errors.New("hook panicked")

// HookError is the error a hook op returns when its Func fails. It aborts
// RunAll; the VM must be Reset before it is run again.
type HookError struct {
	Index int    // the parameter's index in the Set
	Param string // the parameter's node name
	Err   error  // what the Func returned (or ErrHookPanic)
}

func (e *HookError) Error() string {
	return fmt.Sprintf("autogradhooks: hook of parameter %d (%s): %v", e.Index, e.Param, e.Err)
}

func (e *HookError) Unwrap() error { return e.Err }

// RunAll calls vm.RunAll and returns its error with the cause reachable by
// errors.Is and errors.As.
//
// Gorgonia v0.9.18's TapeMachine wraps every failure in an unexported
// vmContextualError that has no Unwrap method, so errors.Is(vm.RunAll(),
// target) is false even when a Func returned target. RunAll keeps the
// message and restores the chain through the error's Err method.
func RunAll(vm gorgonia.VM) error {
	err := vm.RunAll()
	if err == nil {
		return nil
	}
	if c, ok := err.(interface{ Err() error }); ok && c.Err() != nil {
		return &vmError{err: err, cause: c.Err()}
	}
	return err
}

// vmError carries Gorgonia's VM error message and unwraps to its cause.
type vmError struct {
	err   error // as returned by the VM
	cause error // the error the VM wrapped
}

func (e *vmError) Error() string { return e.err.Error() }
func (e *vmError) Unwrap() error { return e.cause }
