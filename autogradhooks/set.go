package autogradhooks

import (
	"errors"
	"fmt"

	"gorgonia.org/gorgonia"
)

// Func is called right after the gradient of parameter idx is computed
// during TapeMachine.RunAll, on RunAll's goroutine. grad is the VM's own
// value (no copy); it stays valid until the next Reset, but a solver's Step
// rewrites it in place. A non-nil error aborts RunAll and is returned from
// it (see RunAll for reaching it with errors.Is).
//
// A Func must not block: the rest of the backward pass waits for it.
type Func func(idx int, grad gorgonia.Value) error

// PlaceFunc is a Func that may also replace the gradient: a non-nil Value
// it returns becomes the hook node's output, and so params[idx].Grad(),
// for the rest of the run. It must have grad's dtype and shape. DDP's
// gradient_as_bucket_view uses it to put each gradient into bucket memory
// (see ddp.Options.GradientAsBucketView): Gorgonia allocates every op's
// result afresh each run, so the gradient can only be moved, by one copy,
// into memory the caller owns.
type PlaceFunc func(idx int, grad gorgonia.Value) (gorgonia.Value, error)

// Set holds the hook-wrapped versions of a model's parameters.
//
// A Set is used while one goroutine builds one graph; it is not safe for
// concurrent use.
type Set struct {
	params  gorgonia.Nodes // the raw parameters, as given to New
	wrapped gorgonia.Nodes // wrapped[i] = ParamHook(params[i]), nil until first asked for
	names   []string
	fn      PlaceFunc
}

// New prepares to wrap each params[i] in an identity Op whose SymDiff emits
// a hook node that calls fn(i, grad). Build the forward graph from s.Node(i)
// instead of params[i]; then call gorgonia.Grad(cost, params...) (or Grad,
// or s.Grad) with the RAW params as usual. Without BindDualValues,
// params[i].Grad() is then the hook node's value, so writing into it in
// place changes what the solver reads.
//
// Every params[i] must be a distinct variable node of one graph. New itself
// adds nothing to the graph: see Node for why the wrapper is created on
// first use.
func New(params gorgonia.Nodes, fn Func) (*Set, error) {
	if fn == nil {
		return nil, errors.New("autogradhooks: New needs a non-nil Func")
	}
	return NewPlacing(params, func(i int, g gorgonia.Value) (gorgonia.Value, error) { return nil, fn(i, g) })
}

// NewPlacing is New with a PlaceFunc: the callback may hand back the Value
// that stands for the gradient from then on.
func NewPlacing(params gorgonia.Nodes, fn PlaceFunc) (*Set, error) {
	if fn == nil {
		return nil, errors.New("autogradhooks: NewPlacing needs a non-nil PlaceFunc")
	}
	if err := checkParams(params); err != nil {
		return nil, err
	}
	s := &Set{
		params:  append(gorgonia.Nodes(nil), params...),
		wrapped: make(gorgonia.Nodes, len(params)),
		names:   make([]string, len(params)),
		fn:      fn,
	}
	for i, p := range params {
		s.names[i] = paramName(p, i)
	}
	return s, nil
}

// Node returns the wrapped version of parameter i, creating it on the first
// call; later calls return the same node. It returns nil when i is out of
// range.
//
// Call Node(i) where the forward graph uses parameter i, not up front. The
// tape runs nodes in creation order, and the hook is created when
// gorgonia.Grad's backward walk (descending creation order) reaches the
// wrapper. A wrapper created right before its first user therefore gets its
// hook right after its gradient; wrappers created before the whole forward
// graph get their hooks after the whole backward pass, which is no better
// than a hook added after Grad. See Note [creation order] in doc.go.
func (s *Set) Node(i int) *gorgonia.Node {
	if i < 0 || i >= len(s.params) {
		return nil
	}
	if s.wrapped[i] == nil {
		op := &paramHook{set: s, idx: i, name: s.names[i], fn: s.fn}
		// ApplyOp cannot fail here: the op is a unary identity whose type
		// unifies with any type, and New checked the node.
		w, err := gorgonia.ApplyOp(op, s.params[i])
		if err != nil {
			return nil
		}
		s.wrapped[i] = w
	}
	return s.wrapped[i]
}

// Nodes returns the wrapped versions of all parameters, in order, creating
// the missing ones now. The slice is a copy. Calling it before building the
// forward graph makes every hook fire at the end of backward (see Node);
// prefer Node(i) at each use.
func (s *Set) Nodes() gorgonia.Nodes {
	out := make(gorgonia.Nodes, len(s.params))
	for i := range out {
		out[i] = s.Node(i)
	}
	return out
}

// Params returns the raw parameters given to New, in order. The slice is a
// copy.
func (s *Set) Params() gorgonia.Nodes { return append(gorgonia.Nodes(nil), s.params...) }

// Len is the number of parameters.
func (s *Set) Len() int { return len(s.params) }

func checkParams(params gorgonia.Nodes) error {
	if len(params) == 0 {
		return errors.New("autogradhooks: New needs at least one parameter")
	}
	seen := make(map[*gorgonia.Node]int, len(params))
	for i, p := range params {
		switch {
		case p == nil:
			return fmt.Errorf("autogradhooks: params[%d] is nil", i)
		case p.Graph() == nil:
			return fmt.Errorf("autogradhooks: params[%d] (%s) belongs to no graph", i, p.Name())
		case p.Graph() != params[0].Graph():
			return fmt.Errorf("autogradhooks: params[%d] (%s) is in a different graph from params[0]", i, p.Name())
		case !p.IsVar():
			return fmt.Errorf("autogradhooks: params[%d] (%s) is not a variable node; gorgonia.Grad can only differentiate "+
				"with respect to variables", i, p.Name())
		}
		if j, dup := seen[p]; dup {
			return fmt.Errorf("autogradhooks: params[%d] and params[%d] are the same node (%s)", j, i, p.Name())
		}
		seen[p] = i
	}
	return nil
}

func paramName(p *gorgonia.Node, i int) string {
	if name := p.Name(); name != "" {
		return name
	}
	return fmt.Sprintf("param%d", i)
}
