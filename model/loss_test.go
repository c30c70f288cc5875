package model

import (
	"math"
	"testing"

	"gorgonia.org/tensor"
)

// With zero weights every logit is 0, so each row's cross-entropy is
// log(classes).
func TestLossOfZeroModelIsLogClasses(t *testing.T) {
	spec := mlpSpec(tensor.Float64, 3)
	m := newPlain(t, spec, 1)
	for i := range m.p.Nodes {
		if err := m.p.SetValue(i, make([]float64, len(m.p.Value(i)))); err != nil {
			t.Fatal(err)
		}
	}
	x, labels := data(spec, 3, 2)
	loss, _ := m.run(t, x, labels)
	if want := math.Log(4); math.Abs(loss-want) > 1e-15 {
		t.Fatalf("loss %v, want log 4 = %v", loss, want)
	}
}

// A single linear layer against the cross-entropy and its gradient
// computed by hand in float64: logits = xW + b, loss = mean over rows of
// logsumexp(logits) - logits[label], dlogits = (softmax - onehot)/n.
func TestLossAndGradientMatchHandComputed(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			spec := mlpSpec(dt, 5)
			m := newPlain(t, spec, 3)
			x, labels := data(spec, 5, 4)
			loss, grads := m.run(t, x, labels)

			w, b := m.p.Value(0), m.p.Value(1) // [3,4], [4]
			const n, d, c = 5, 3, 4
			wantLoss := 0.0
			dW, db := make([]float64, d*c), make([]float64, c)
			for r := range n {
				logits := make([]float64, c)
				top := math.Inf(-1)
				for j := range c {
					logits[j] = b[j]
					for k := range d {
						logits[j] += x[r*d+k] * w[k*c+j]
					}
					top = max(top, logits[j])
				}
				sum := 0.0
				for j := range c {
					sum += math.Exp(logits[j] - top)
				}
				lse := top + math.Log(sum)
				wantLoss += (lse - logits[labels[r]]) / n
				for j := range c {
					dz := math.Exp(logits[j]-lse) / n
					if j == labels[r] {
						dz -= 1.0 / n
					}
					db[j] += dz
					for k := range d {
						dW[k*c+j] += x[r*d+k] * dz
					}
				}
			}
			tol := 1e-14
			if dt == tensor.Float32 {
				tol = 1e-6
			}
			if math.Abs(loss-wantLoss) > tol*wantLoss {
				t.Errorf("loss %v, want %v", loss, wantLoss)
			}
			if e := maxRelDiff(grads, [][]float64{dW, db}); e > tol*10 {
				t.Errorf("gradient differs from the hand-computed one by %g (relative)\n got %v\nwant %v", e, grads,
					[][]float64{dW, db})
			}
		})
	}
}

// A short batch padded to the graph's batch gives the loss and gradients
// of a graph whose batch is exactly the short batch.
func TestPaddingRowsChangeNothing(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, act := range []string{"relu", "tanh"} {
			t.Run(dt.String()+"/"+act, func(t *testing.T) {
				padded, exact := mlpSpec(dt, 8, 6), mlpSpec(dt, 5, 6)
				padded.Activation, exact.Activation = act, act
				a, b := newPlain(t, padded, 5), newPlain(t, exact, 5)
				x, labels := data(exact, 5, 6)
				lossA, gradsA := a.run(t, x, labels)
				lossB, gradsB := b.run(t, x, labels)
				if lossA != lossB {
					t.Errorf("padded loss %v, unpadded %v", lossA, lossB)
				}
				if e := maxRelDiff(gradsA, gradsB); e != 0 {
					t.Errorf("padded gradients differ from unpadded ones by %g (relative)", e)
				}
				// And the padded graph does depend on the rows fed.
				x[0] += 0.5
				if lossC, _ := a.run(t, x, labels); lossC == lossA {
					t.Errorf("changing a real row left the loss at %v", lossC)
				}
			})
		}
	}
}

// One class and one row: the softmax must run over classes, never rows.
func TestDegenerateShapes(t *testing.T) {
	for _, c := range []struct{ batch, classes int }{{1, 4}, {3, 1}, {1, 1}} {
		spec := mlpSpec(tensor.Float64, c.batch)
		spec.Classes = c.classes
		m := newPlain(t, spec, 7)
		x, labels := data(spec, c.batch, 8)
		loss, _ := m.run(t, x, labels)
		if c.classes == 1 && loss != 0 {
			t.Errorf("batch %d, 1 class: loss %v, want 0", c.batch, loss)
		}
		if c.classes > 1 && !(loss > 0) {
			t.Errorf("batch %d, %d classes: loss %v, want > 0", c.batch, c.classes, loss)
		}
	}
}

func TestCorrectCountsArgmaxOfRealRows(t *testing.T) {
	spec := mlpSpec(tensor.Float64, 4)
	m := newPlain(t, spec, 9)
	x, _ := data(spec, 3, 10)
	if got := m.net.Correct([]int{0}); got != 0 {
		t.Fatalf("Correct before any run: %d, want 0", got)
	}
	m.run(t, x, []int{0, 0, 0})
	logits := m.net.LogitsValue()
	if len(logits) != 4*4 {
		t.Fatalf("%d logits, want 16", len(logits))
	}
	labels := make([]int, 3)
	for r := range labels {
		for j := range 4 {
			if logits[r*4+j] > logits[r*4+labels[r]] {
				labels[r] = j
			}
		}
	}
	if got := m.net.Correct(labels); got != 3 {
		t.Errorf("Correct(argmax labels %v) = %d, want 3 (logits %v)", labels, got, logits)
	}
	labels[1] = (labels[1] + 1) % 4
	if got := m.net.Correct(labels); got != 2 {
		t.Errorf("Correct with one wrong label = %d, want 2", got)
	}
}

func TestFeedRejectsBadBatches(t *testing.T) {
	spec := mlpSpec(tensor.Float64, 2)
	m := newPlain(t, spec, 1)
	for _, c := range []struct {
		name   string
		x      []float64
		labels []int
	}{
		{"empty", nil, nil},
		{"too many rows", make([]float64, 9), []int{0, 1, 2}},
		{"features for another count", make([]float64, 5), []int{0, 1}},
		{"label too large", make([]float64, 3), []int{4}},
		{"negative label", make([]float64, 3), []int{-1}},
	} {
		if err := m.net.Feed(spec, c.x, c.labels); err == nil {
			t.Errorf("%s: Feed accepted it", c.name)
		}
	}
	other := spec
	other.Batch = 3
	if err := m.net.Feed(other, make([]float64, 3), []int{0}); err == nil {
		t.Error("Feed accepted a spec of another batch")
	}
}

// Rows whose logits are far apart must not overflow: Gorgonia's own
// LogSoftMax subtracts another row's maximum and gives NaN here.
func TestLossIsStableForLargeLogits(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		spec := mlpSpec(dt, 2)
		m := newPlain(t, spec, 1)
		w := make([]float64, 3*4)
		w[0] = 1000 // logit 0 of each row is 1000·x0
		if err := m.p.SetValue(0, w); err != nil {
			t.Fatal(err)
		}
		if err := m.p.SetValue(1, make([]float64, 4)); err != nil {
			t.Fatal(err)
		}
		// Row 0: all logits 0. Row 1: logits [1000, 0, 0, 0], label 1.
		loss, grads := m.run(t, []float64{0, 0, 0, 1, 0, 0}, []int{0, 1})
		want := (math.Log(4) + 1000) / 2
		if math.Abs(loss-want) > 1e-6*want {
			t.Errorf("%v: loss %v, want %v", dt, loss, want)
		}
		for i, g := range grads {
			for _, v := range g {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("%v: gradient of %s holds %v", dt, m.p.Names[i], v)
				}
			}
		}
	}
}
