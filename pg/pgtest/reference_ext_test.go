package pgtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestGatherScatterKnownAnswers(t *testing.T) {
	i32 := func(v ...int32) pg.Tensor { return pg.Int32s(v) }
	got, err := Gather([]pg.Tensor{i32(1, 2), i32(3, 4), i32(5, 6)})
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare(got, i32(1, 2, 3, 4, 5, 6), 0); err != nil {
		t.Errorf("Gather: %v", err)
	}
	if got, err := Gather([]pg.Tensor{{Dtype: pg.Float16}, {Dtype: pg.Float16}}); err != nil || got.Len() != 0 ||
		got.Dtype != pg.Float16 {
		t.Errorf("Gather of empty tensors: %v x %d, %v", got.Dtype, got.Len(), err)
	}
	in := i32(1, 2, 3, 4, 5, 6)
	parts, err := Scatter(in, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []pg.Tensor{i32(1, 2), i32(3, 4), i32(5, 6)} {
		if err := Compare(parts[i], want, 0); err != nil {
			t.Errorf("Scatter chunk %d: %v", i, err)
		}
	}
	parts[0].Data[0] = 99
	if pg.View[int32](in)[0] != 1 {
		t.Error("Scatter's chunks share memory with its input")
	}
}

func TestGatherScatterRefuseBadInputs(t *testing.T) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	for name, ins := range map[string][]pg.Tensor{
		"none":           nil,
		"lengths differ": {f32(2), f32(3)},
		"dtypes differ":  {f32(2), pg.NewTensor(pg.Int32, 2)},
		"ragged":         {{Dtype: pg.Float32, Data: make([]byte, 3)}},
	} {
		if _, err := Gather(ins); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("Gather %s: got %v, want pg.ErrInvalidArgument", name, err)
		}
	}
	if _, err := Scatter(f32(5), 2); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("Scatter of 5 into 2: got %v, want pg.ErrInvalidArgument", err)
	}
	if _, err := Scatter(f32(4), 0); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("Scatter into 0: got %v, want pg.ErrInvalidArgument", err)
	}
}

func TestAllToAllKnownAnswers(t *testing.T) {
	u8 := func(v ...uint8) pg.Tensor { return pg.Uint8s(v) }
	// Equal chunks: a transpose.
	outs, err := AllToAll([]pg.Tensor{u8(1, 2), u8(3, 4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []pg.Tensor{u8(1, 3), u8(2, 4)} {
		if err := Compare(outs[j], want, 0); err != nil {
			t.Errorf("equal chunks, rank %d: %v", j, err)
		}
	}
	// Uneven, with empty chunks: rank 0 sends [1] to itself, nothing to
	// rank 1 and [2 3] to rank 2; rank 1 sends nothing; rank 2 sends [4]
	// to rank 0, [5 6] to rank 1 and nothing to itself.
	splits := [][]int{{1, 0, 2}, {0, 0, 0}, {1, 2, 0}}
	outs, err = AllToAll([]pg.Tensor{u8(1, 2, 3), u8(), u8(4, 5, 6)}, splits)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []pg.Tensor{u8(1, 4), u8(5, 6), u8(2, 3)} {
		if err := Compare(outs[j], want, 0); err != nil {
			t.Errorf("uneven, rank %d: %v", j, err)
		}
	}
}

func TestAllToAllRefusesBadInputs(t *testing.T) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	for _, c := range []struct {
		name   string
		ins    []pg.Tensor
		splits [][]int
	}{
		{"none", nil, nil},
		{"not a multiple", []pg.Tensor{f32(3), f32(3)}, nil},
		{"dtypes differ", []pg.Tensor{f32(2), pg.NewTensor(pg.Int32, 2)}, nil},
		{"rows", []pg.Tensor{f32(2), f32(2)}, [][]int{{1, 1}}},
		{"columns", []pg.Tensor{f32(2), f32(2)}, [][]int{{2}, {1, 1}}},
		{"sum", []pg.Tensor{f32(2), f32(2)}, [][]int{{1, 2}, {1, 1}}},
		{"negative", []pg.Tensor{f32(2), f32(2)}, [][]int{{-1, 3}, {1, 1}}},
	} {
		if _, err := AllToAll(c.ins, c.splits); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want pg.ErrInvalidArgument", c.name, err)
		}
	}
}

// TestRandomSplits checks that the uneven alltoalls are uneven, have
// empty chunks, and are the same for the same seed.
func TestRandomSplits(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for seed := range uint64(6) {
			s := randomSplits(n, 300, seed)
			if !slices.EqualFunc(s, randomSplits(n, 300, seed), slices.Equal) {
				t.Fatalf("n=%d seed=%d: two calls differ", n, seed)
			}
			zeros, distinct := 0, map[int]bool{}
			for _, row := range s {
				for _, v := range row {
					if v < 0 || v > 300 {
						t.Fatalf("n=%d seed=%d: split %d out of range", n, seed, v)
					}
					if v == 0 {
						zeros++
					}
					distinct[v] = true
				}
			}
			if zeros == 0 {
				t.Errorf("n=%d seed=%d: no empty chunk in %v", n, seed, s)
			}
			if n > 2 && len(distinct) < 3 {
				t.Errorf("n=%d seed=%d: %v is hardly uneven", n, seed, s)
			}
			if _, err := AllToAll(randomInputs(s), s); err != nil {
				t.Errorf("n=%d seed=%d: %v", n, seed, err)
			}
		}
		for seed := range uint64(3) {
			s := splitsSumming(n, 1000, seed)
			for i, row := range s {
				if sum(row) != 1000 || slices.Min(row) < 0 {
					t.Errorf("n=%d seed=%d: row %d is %v, want non-negative entries summing to 1000", n, seed, i, row)
				}
				if n > 1 && row[(i+1)%n] != 0 {
					t.Errorf("n=%d seed=%d: row %d is %v, want an empty chunk for rank %d", n, seed, i, row, (i+1)%n)
				}
			}
		}
	}
}

func randomInputs(splits [][]int) []pg.Tensor {
	ins := make([]pg.Tensor, len(splits))
	for i, row := range splits {
		ins[i] = randomBytes(pg.Int32, sum(row), 1, uint64(i))
	}
	return ins
}

func TestSplitMembers(t *testing.T) {
	got := splitMembers([]int{1, 0, 1, pg.NoColor, 0, 1}, []int{0, 5, -1, 0, 5, 0})
	want := [][]int{{1, 4}, {2, 0, 5}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("splitMembers = %v, want %v", got, want)
	}
}

func TestRingPlanMatches(t *testing.T) {
	// Every send of the ring has a receive on its peer with the same tag
	// and message, in the same order among those of its tag; ordered, in
	// the same order among those between the two ranks.
	for _, ordered := range []bool{false, true} {
		for n := 2; n <= 5; n++ {
			type key struct{ from, to, tag int }
			sent, recvd := map[key][][]byte{}, map[key][][]byte{}
			for r := range n {
				for _, o := range ringPlan(n, r, 2, ordered) {
					if o.send {
						sent[key{r, o.peer, o.tag}] = append(sent[key{r, o.peer, o.tag}], o.want.Data)
						sent[key{r, o.peer, -1}] = append(sent[key{r, o.peer, -1}], o.want.Data)
					} else {
						recvd[key{o.peer, r, o.tag}] = append(recvd[key{o.peer, r, o.tag}], o.want.Data)
						recvd[key{o.peer, r, -1}] = append(recvd[key{o.peer, r, -1}], o.want.Data)
					}
				}
			}
			if len(sent) != len(recvd) {
				t.Fatalf("n=%d: %d send streams, %d receive streams", n, len(sent), len(recvd))
			}
			for k, s := range sent {
				if same := slices.EqualFunc(s, recvd[k], slices.Equal); k.tag >= 0 && !same || k.tag < 0 && same != ordered {
					t.Errorf("n=%d ordered=%v: from %d to %d with tag %d (-1: any): the receives expect what was sent in order: %v",
						n, ordered, k.from, k.to, k.tag, same)
				}
			}
		}
	}
}
