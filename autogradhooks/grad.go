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
// hook's value (a *BypassError). Build the graph from the wrapped nodes
// alone.
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
			return nil, nil, &BypassError{Index: i, Param: params[i].Name(), Partly: true}
		}
		grads[i] = g[k]
	}
	return grads, unused, nil
}

// Grad is Grad(cost, s.Params()) that also requires every used parameter's
// gradient to pass through this Set's hook, so that every hook the reducer
// waits for will fire: it fails with a *BypassError when the forward
// graph used params[i] directly instead of s.Node(i).
func (s *Set) Grad(cost *gorgonia.Node) (grads gorgonia.Nodes, unused []int, err error) {
	if grads, unused, err = Grad(cost, s.params); err != nil {
		return nil, nil, err
	}
	for i, g := range grads {
		if g == nil {
			continue
		}
		if op, ok := g.Op().(*gradHook); !ok || op.set != s || op.idx != i {
			return nil, nil, &BypassError{Index: i, Param: s.names[i]}
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

// SharedGradients returns the groups of parameters whose gradients are one
// node of the graph, each group ascending, groups in order of their first
// member; nil when every gradient is a node of its own.
//
// Gorgonia hash-conses its graph (Note [hash-consing]): the gradients of
// two parameters computed by identical expressions, such as the weights of
// two heads of one shape fed the same input and summed, become one node,
// and so one Value. Their hooks are different nodes, but both pass on that
// one Value, so params[i].Grad() and params[j].Grad() are the same memory.
// A caller that writes a different result into each (DDP's averaged
// gradients) must give all but one of them memory of their own.
//
// grads is as Grad returns it: nil for an unused parameter; a hook node is
// looked through to the gradient it reads. It is a walk of the grads only,
// done once per graph.
func SharedGradients(grads gorgonia.Nodes) [][]int {
	byNode := map[*gorgonia.Node][]int{}
	var order []*gorgonia.Node
	for i, g := range grads {
		if g == nil {
			continue
		}
		src := gradientSource(g)
		if _, ok := byNode[src]; !ok {
			order = append(order, src)
		}
		byNode[src] = append(byNode[src], i)
	}
	var groups [][]int
	for _, n := range order {
		if len(byNode[n]) > 1 {
			groups = append(groups, byNode[n])
		}
	}
	return groups
}

// gradientSource looks through hook nodes (which pass their input's Value
// on) to the node that computes a gradient.
func gradientSource(n *gorgonia.Node) *gorgonia.Node {
	for {
		if _, ok := n.Op().(*gradHook); !ok {
			return n
		}
		children := childrenOf(n.Graph(), n)
		if len(children) != 1 {
			return n
		}
		n = children[0]
	}
}
