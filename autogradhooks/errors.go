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

// BypassError says that the forward graph used a wrapped parameter
// directly, not (only) through its wrapper: the hook would see part of
// the gradient (Partly) or none of it. Grad and Set.Grad return it. The
// message names Set.Node, this package's way to the wrapper; a package
// that hands out the wrappers under another name (ddp's DDP.Node) reads
// Index and Partly and says it in its own words.
type BypassError struct {
	Index  int    // the parameter's index in params
	Param  string // the parameter's node name
	Partly bool   // used both through the wrapper and directly
}

func (e *BypassError) Error() string {
	if e.Partly {
		return fmt.Sprintf("autogradhooks: params[%d] (%s) is wrapped by a hook Set but cost also reaches it directly, "+
			"so its hook would miss part of its gradient; build the forward graph from Set.Node(%d) only", e.Index, e.Param,
			e.Index)
	}
	return fmt.Sprintf("autogradhooks: the gradient of params[%d] (%s) does not pass through its hook, "+
		"so the hook would never fire; build the forward graph from Set.Node(%d) instead of the raw parameter", e.Index,
		e.Param, e.Index)
}

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
