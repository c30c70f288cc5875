package ddp

import (
	"errors"
	"strings"
	"testing"

	"github.com/goddp/ddp/autogradhooks"
	"github.com/goddp/ddp/pg"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A model that forgot d.Node is told so in DDP's words: the message
// names d.Node (what the user calls), never autogradhooks' Set.Node,
// which a DDP user cannot reach; errors.As still finds the
// *autogradhooks.BypassError.
func TestGradNamesDDPNode(t *testing.T) {
	for _, c := range []struct {
		name    string
		wrapped bool // the loss also uses d.Node(1)
		want    string
	}{
		{"raw only", false,
			"ddp: parameter 1 (b) reaches the loss directly, not through d.Node(1), so its gradient hook would never fire"},
		{"raw and wrapped", true, "ddp: parameter 1 (b) reaches the loss both through d.Node(1) and directly"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			var err error
			noErrors(t, onGroups(groupsOf(t, "local", 1), func(_ int, g pg.ProcessGroup) error {
				gr := G.NewGraph()
				a := G.NewVector(gr, tensor.Float64, G.WithShape(3), G.WithName("a"), G.WithInit(G.Zeroes()))
				b := G.NewVector(gr, tensor.Float64, G.WithShape(3), G.WithName("b"), G.WithInit(G.Zeroes()))
				d, werr := Wrap(ctx, g, G.Nodes{a, b}, Options{})
				if werr != nil {
					return werr
				}
				terms := []*G.Node{G.Must(G.Sum(d.Node(0))), G.Must(G.Sum(b))} // b: the forgotten d.Node(1)
				if c.wrapped {
					terms = append(terms, G.Must(G.Sum(d.Node(1))))
				}
				cost := terms[0]
				for _, x := range terms[1:] {
					cost = G.Must(G.Add(cost, x))
				}
				_, err = d.Grad(cost)
				return nil
			}))
			var bypass *autogradhooks.BypassError
			if err == nil || !strings.HasPrefix(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "build the forward graph with d.Node(1) (DDP.Node)") ||
				strings.Contains(err.Error(), "Set.Node") || !errors.As(err, &bypass) || bypass.Index != 1 ||
				bypass.Partly != c.wrapped {
				t.Errorf("d.Grad: %v\nwant it to start %q, name d.Node(1), not Set.Node, and wrap a *BypassError{Index: 1, "+
					"Partly: %v}", err, c.want, c.wrapped)
			}
		})
	}
}
