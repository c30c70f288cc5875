package reducer

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnfinishedReduction: a new iteration began, or Finalize ran, before
// every parameter of the previous backward got a gradient. torch's
// "Expected to have finished reduction in the prior iteration".
var ErrUnfinishedReduction = errors.New(
	"reducer: expected to have finished reduction in the prior iteration before starting a new one")

// ErrMarkedTwice: a parameter's gradient hook fired twice in one backward.
var ErrMarkedTwice = errors.New("reducer: expected to mark a variable ready only once")

// ErrBadGradient: a gradient had the wrong dtype or size.
var ErrBadGradient = errors.New("reducer: gradient does not match its parameter")

// ErrSharedGradients: two gradients given to MarkReady in one iteration
// share memory, so Finalize cannot write a result into each (Note [one
// memory per result]).
var ErrSharedGradients = errors.New("reducer: two parameters' gradients share memory")

// ErrModelMismatch: ranks disagree about the model.
var ErrModelMismatch = errors.New("reducer: DDP expects the same model on every rank")

// ErrGraphChanged: with StaticGraph, a parameter unused in the first
// iteration got a gradient later.
var ErrGraphChanged = errors.New("reducer: your training graph has changed in this iteration")

// ErrHookRegistration: a comm hook was registered twice, or after training began.
var ErrHookRegistration = errors.New("reducer: a comm hook can only be registered once, before the first backward")

func (r *Reducer) names(indices []int) string { return names(r.params, indices) }

// names lists the parameters' names, comma-separated.
func names(params []Param, indices []int) string {
	parts := make([]string, len(indices))
	for i, idx := range indices {
		parts[i] = params[idx].Name
	}
	return strings.Join(parts, ", ")
}

// unfinishedError names the parameters that got no gradient, with the
// advice torch gives for each configuration.
func (m *machine) unfinishedError(missing []int) error {
	var b strings.Builder
	switch {
	case m.static:
		b.WriteString("This error indicates that your training graph has changed in this iteration, e.g., one parameter is " +
			"used in the first iteration but unused in the second. This is not compatible with StaticGraph.")
	case m.findUnused:
		b.WriteString("This error indicates that your model has parameters that were not used in producing the loss. Since " +
			"FindUnusedParameters is enabled, this likely means that not all forward outputs participate in computing the " +
			"loss. You can fix this by making sure all forward outputs participate in calculating the loss.")
	default:
		b.WriteString("This error indicates that your model has parameters that were not used in producing the loss. You " +
			"can enable unused parameter detection by setting Options.FindUnusedParameters (ddp-train " +
			"--find-unused-parameters), and by making sure all forward outputs participate in calculating the loss.")
	}
	fmt.Fprintf(&b, "\nParameter indices which did not receive grad for rank %d: %v", m.rank, missing)
	fmt.Fprintf(&b, "\nParameters which did not receive grad for rank %d: %s", m.rank, names(m.params, missing))
	return fmt.Errorf("%w. %s", ErrUnfinishedReduction, b.String())
}

// markedTwiceError names the parameter whose gradient hook fired twice in one iteration, with torch's
// three causes.
func (m *machine) markedTwiceError(i int) error {
	return fmt.Errorf("%w: the parameter at index %d with name %s got a second gradient in this iteration. "+
		"It is used outside the forward graph, or reused in several backward passes of one iteration, "+
		"or the unused parameter detection is wrong (a parameter passed as unused also produced a gradient)",
		ErrMarkedTwice, i, m.params[i].Name)
}
