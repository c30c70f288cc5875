package autogradhooks

import (
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
)

// preHooks returns, per parameter, the node its hook reads: the gradient
// as computed by the backward pass. It runs before the machine does, since
// hooks must not call t.Fatal from RunAll's goroutine.
func preHooks(t testing.TB, m *mlp) G.Nodes {
	t.Helper()
	out := make(G.Nodes, len(m.grads))
	for i, g := range m.grads {
		c := childrenOf(m.g, g)
		if _, ok := g.Op().(*gradHook); !ok || len(c) != 1 {
			t.Fatalf("grads[%d] = %v is not a hook node", i, g)
		}
		out[i] = c[0]
	}
	return out
}

// computed lists the parameters whose gradient node holds a value.
func computed(pre G.Nodes) []int {
	var out []int
	for i, n := range pre {
		if n.Value() != nil {
			out = append(out, i)
		}
	}
	return out
}

// TestHooksFireAsGradientsAreComputed runs a fresh machine once (node
// values survive Reset, so only the first run can tell "not computed yet"
// from "computed last time"). Whenever a hook fires, the parameters whose
// gradient exists must be exactly the ones whose hooks already fired plus
// this one: no other parameter's gradient is computed between a gradient
// and its hook, and the first layers' gradients do not exist yet.
func TestHooksFireAsGradientsAreComputed(t *testing.T) {
	t.Run("float32", testFireOrder[float32])
	t.Run("float64", testFireOrder[float64])
}

func testFireOrder[T float](t *testing.T) {
	var pre G.Nodes
	var fired []int
	m := buildMLP[T](t, atUse, func(i int, grad G.Value) error {
		want := append(slices.Clone(fired), i)
		slices.Sort(want)
		if got := computed(pre); !slices.Equal(got, want) {
			t.Errorf("hook %d fired when the gradients of %v existed, want %v", i, got, want)
		}
		fired = append(fired, i)
		return nil
	})
	pre = preHooks(t, m)
	vm := G.NewTapeMachine(m.g)
	defer vm.Close()
	if err := RunAll(vm); err != nil {
		t.Fatal(err)
	}
	if len(fired) != len(m.params) {
		t.Fatalf("fired %v, want every one of %d parameters once", fired, len(m.params))
	}
	for k := 1; k < len(fired); k++ {
		if layerOf(fired[k]) > layerOf(fired[k-1]) {
			t.Fatalf("fire order %v is not last layer first", fired)
		}
	}
	if got, want := fired, []int{7, 6, 5, 4, 3, 2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("fire order %v, want %v (bias before weight, last layer first)", got, want)
	}
}

// TestWrappingUpFrontFiresLate documents the reason Node wraps lazily: the
// tape runs nodes in creation order, so wrappers created before the
// forward graph get their hooks only after the whole backward pass. The
// first hook then finds every gradient already computed.
func TestWrappingUpFrontFiresLate(t *testing.T) {
	var pre G.Nodes
	var first []int
	m := buildMLP[float64](t, upFront, func(i int, grad G.Value) error {
		if first == nil {
			first = computed(pre)
		}
		return nil
	})
	pre = preHooks(t, m)
	vm := G.NewTapeMachine(m.g)
	defer vm.Close()
	if err := RunAll(vm); err != nil {
		t.Fatal(err)
	}
	if len(first) != len(m.params) {
		t.Fatalf("with up-front wrapping the first hook saw gradients %v; expected all %d (hooks at the end)", first,
			len(m.params))
	}
}

// TestHooksMatchPlainGraph checks, over several iterations with Reset in
// between and a new batch each time, that every hook fires once per
// iteration, sees bit for bit the gradient a graph without hooks computes,
// and is handed the very value params[i].Grad() returns afterwards.
func TestHooksMatchPlainGraph(t *testing.T) {
	t.Run("float32", testMatchPlain[float32])
	t.Run("float64", testMatchPlain[float64])
}

func testMatchPlain[T float](t *testing.T) {
	const iterations = 3
	seen := map[int]G.Value{}   // what each hook was handed this iteration
	copied := map[int]G.Value{} // a copy taken while the hook ran
	hooked := buildMLP[T](t, atUse, func(i int, grad G.Value) error {
		if _, twice := seen[i]; twice {
			t.Errorf("hook %d fired twice in one iteration", i)
		}
		c, err := G.CloneValue(grad)
		seen[i], copied[i] = grad, c
		return err
	})
	ref := buildMLP[T](t, plain, nil)
	hvm, rvm := G.NewTapeMachine(hooked.g), G.NewTapeMachine(ref.g)
	defer hvm.Close()
	defer rvm.Close()

	for it := range iterations {
		clear(seen)
		clear(copied)
		hooked.setInput(t, it)
		ref.setInput(t, it)
		if err := RunAll(hvm); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		if err := RunAll(rvm); err != nil {
			t.Fatalf("iteration %d, plain graph: %v", it, err)
		}
		if len(seen) != len(hooked.params) {
			t.Fatalf("iteration %d: %d of %d hooks fired", it, len(seen), len(hooked.params))
		}
		if !slices.Equal(bits(t, hooked.cost.Value()), bits(t, ref.cost.Value())) {
			t.Fatalf("iteration %d: cost %v, plain graph %v", it, hooked.cost.Value(), ref.cost.Value())
		}
		for i, p := range hooked.params {
			want := bits(t, ref.grads[i].Value())
			if !slices.Equal(bits(t, copied[i]), want) {
				t.Errorf("iteration %d: hook of %s saw %v, plain gradient %v", it, p.Name(), seen[i], ref.grads[i].Value())
			}
			g, err := p.Grad()
			if err != nil || g != seen[i] {
				t.Errorf("iteration %d: %s.Grad() = %p, %v; want the hook's value %p", it, p.Name(), g, err, seen[i])
			}
		}
		hvm.Reset()
		rvm.Reset()
	}
}
