package autogradhooks

import "gorgonia.org/gorgonia"

// Unused returns, ascending, the indices of params from which cost is not
// reached through differentiable edges: parameters that are structurally
// disconnected, sit on a side branch that does not feed cost, or are used
// only through non-differentiable ops (a comparison, an argmax). A parameter
// that is multiplied by a constant zero is used: its gradient exists and is
// zero. When params were wrapped by New, the wrapped node counts as the
// param, since the wrapper is differentiable. A nil cost reaches nothing.
//
// These are the parameters gorgonia.Grad rejects with a SymDiffError
// ("Non Differentiable WRTs"), and whose hooks never fire. DDP marks them
// ready at the start of backward (find_unused_parameters).
func Unused(cost *gorgonia.Node, params gorgonia.Nodes) []int {
	reached := reachable(cost)
	var unused []int
	for i, p := range params {
		if _, ok := reached[p]; !ok {
			unused = append(unused, i)
		}
	}
	return unused
}

// reachable walks from cost towards the inputs, following only the edges
// that cost is differentiable along. It mirrors Gorgonia's unexported
// forwardDiffAnalysis: an op that is not an SDOp is not differentiated
// through (Gorgonia itself would index a nil DiffWRT slice there).
func reachable(cost *gorgonia.Node) map[*gorgonia.Node]struct{} {
	seen := map[*gorgonia.Node]struct{}{}
	if cost == nil || cost.Graph() == nil {
		return seen
	}
	g := cost.Graph()
	stack := gorgonia.Nodes{cost}
	seen[cost] = struct{}{}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		children := childrenOf(g, n)
		diffs := diffWRT(n, len(children))
		for j, c := range children {
			if _, ok := seen[c]; ok || j >= len(diffs) || !diffs[j] {
				continue
			}
			seen[c] = struct{}{}
			stack = append(stack, c)
		}
	}
	return seen
}

// childrenOf returns n's inputs in argument order. Gorgonia v0.9.18 exports
// no Children method; ExprGraph.From returns the children slice in order.
func childrenOf(g *gorgonia.ExprGraph, n *gorgonia.Node) gorgonia.Nodes {
	it := g.From(n.ID())
	if it == nil {
		return nil
	}
	var out gorgonia.Nodes
	for it.Next() {
		if c, ok := it.Node().(*gorgonia.Node); ok {
			out = append(out, c)
		}
	}
	return out
}

func diffWRT(n *gorgonia.Node, arity int) []bool {
	if arity == 0 {
		return nil
	}
	op, ok := n.Op().(gorgonia.SDOp)
	if !ok {
		return nil
	}
	return op.DiffWRT(arity)
}
