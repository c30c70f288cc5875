package autogradhooks

import (
	"errors"
	"fmt"

	"gorgonia.org/gorgonia"
)

// Grad is gorgonia.Grad(cost, params...) for the parameters cost uses.
// gorgonia.Grad fails with a SymDiffError when any parameter is unused, so
// Grad differentiates only the used ones: grads[i] is params[i]'s gradient
// node, or nil when i is in unused (ascending, as from Unused).
//
// When params[i] was wrapped by a Set, grads[i] is its hook node. Grad
// returns an error when a wrapped parameter is also used directly: its hook
// would see only part of the gradient, and params[i].Grad() would not be the
// hook's value. Build the graph from the wrapped nodes alone.
func Grad(cost *gorgonia.Node, params gorgonia.Nodes) (grads gorgonia.Nodes, unused []int, err error) {
	if cost == nil {
		return nil, nil, errors.New("autogradhooks: Grad needs a cost node")
	}
	unused = Unused(cost, params)
	used := complement(len(params), unused)
	grads = make(gorgonia.Nodes, len(params))
	if len(used) == 0 {
		return grads, unused, nil
	}
	wrt := make(gorgonia.Nodes, len(used))
	for k, i := range used {
		wrt[k] = params[i]
	}
	g, err := gorgonia.Grad(cost, wrt...)
	if err != nil {
		return nil, nil, fmt.Errorf("autogradhooks: differentiating %d used parameters: %w", len(used), err)
	}
	for k, i := range used {
		if _, hooked := g[k].Op().(*gradHook); !hooked && isWrapped(params[i]) {
			return nil, nil, fmt.Errorf("autogradhooks: params[%d] (%s) is wrapped by a hook Set but cost also reaches it directly, "+
				"so its hook would miss part of its gradient; build the forward graph from Set.Node(%d) only", i, params[i].Name(), i)
		}
		grads[i] = g[k]
	}
	return grads, unused, nil
}

// Grad is Grad(cost, s.Params()) that also requires every used parameter's
// gradient to pass through this Set's hook, so that every hook the reducer
// waits for will fire: it fails when the forward graph used params[i]
// directly instead of s.Node(i).
func (s *Set) Grad(cost *gorgonia.Node) (grads gorgonia.Nodes, unused []int, err error) {
	if grads, unused, err = Grad(cost, s.params); err != nil {
		return nil, nil, err
	}
	for i, g := range grads {
		if g == nil {
			continue
		}
		if op, ok := g.Op().(*gradHook); !ok || op.set != s || op.idx != i {
			return nil, nil, fmt.Errorf("autogradhooks: the gradient of params[%d] (%s) does not pass through its hook, "+
				"so the hook would never fire; build the forward graph from Set.Node(%d) instead of the raw parameter", i, s.names[i], i)
		}
	}
	return grads, unused, nil
}

// complement returns, ascending, the indices below n that are not in
// sorted.
func complement(n int, sorted []int) []int {
	out := make([]int, 0, n-len(sorted))
	for i, k := 0, 0; i < n; i++ {
		if k < len(sorted) && sorted[k] == i {
			k++
			continue
		}
		out = append(out, i)
	}
	return out
}

// isWrapped reports whether some Set has wrapped p.
func isWrapped(p *gorgonia.Node) bool {
	it := p.Graph().To(p.ID())
	for it != nil && it.Next() {
		if n, ok := it.Node().(*gorgonia.Node); ok {
			if _, ok := n.Op().(*paramHook); ok {
				return true
			}
		}
	}
	return false
}
