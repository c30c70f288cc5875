package bucket

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/goddp/ddp/pg"
)

func dense(dt pg.Dtype, numels ...int) []Param {
	ps := make([]Param, len(numels))
	for i, n := range numels {
		ps[i] = Param{Numel: n, Dtype: dt}
	}
	return ps
}

// alternate interleaves float32 params of n32 elements and float64 params of
// n64 elements, count of each, as torch's multi-dtype tests do.
func alternate(count, n32, n64 int) []Param {
	var ps []Param
	for range count {
		ps = append(ps, Param{Numel: n32, Dtype: pg.Float32}, Param{Numel: n64, Dtype: pg.Float64})
	}
	return ps
}

// The cases of torch's ComputeBucketAssignmentTest (test_c10d_common.py).
func TestAssignBySizeTorchCases(t *testing.T) {
	cases := []struct {
		name        string
		params      []Param
		limits      []int
		wantBuckets [][]int
		wantLimits  []int
	}{
		{"single_limit_single_dtype", dense(pg.Float32, 100, 200, 100, 50), []int{400},
			[][]int{{0}, {1}, {2}, {3}}, []int{400, 400, 400, 400}},
		{"single_limit_multi_dtype", alternate(3, 50, 25), []int{400},
			[][]int{{0, 2}, {1, 3}, {4}, {5}}, []int{400, 400, 400, 400}},
		{"multi_limit_single_dtype", dense(pg.Float32, 10, 10, 10, 10), []int{40, 80},
			[][]int{{0}, {1, 2}, {3}}, []int{40, 80, 80}},
		{"multi_limit_multi_dtype", alternate(3, 50, 25), []int{200, 400},
			[][]int{{0}, {1}, {2, 4}, {3, 5}}, []int{200, 200, 400, 400}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, lims, err := AssignBySize(c.params, c.limits, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.wantBuckets) || !reflect.DeepEqual(lims, c.wantLimits) {
				t.Fatalf("got %v %v, want %v %v", got, lims, c.wantBuckets, c.wantLimits)
			}
		})
	}
}

func TestAssignBySizeSparseAlone(t *testing.T) {
	ps := dense(pg.Float32, 10, 10, 10)
	ps[1].ExpectSparse = true
	got, lims, err := AssignBySize(ps, []int{1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 2}, {1}}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(lims, []int{1 << 20, 0}) {
		t.Fatalf("got %v %v, want %v [1048576 0]", got, lims, want)
	}
}

func TestAssignBySizeDevicesNeverMix(t *testing.T) {
	ps := dense(pg.Float32, 10, 10, 10, 10)
	ps[1].Device, ps[3].Device = 1, 1
	got, _, err := AssignBySize(ps, []int{1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]int{{0, 2}, {1, 3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// With an order (a rebuild), indices come from order and buckets keep the
// order in which they closed.
func TestAssignBySizeWithOrder(t *testing.T) {
	numel := []int{10, 20, 30, 40}
	order := []int{3, 1, 0, 2} // gradient-ready order
	ps := make([]Param, len(order))
	for i, idx := range order {
		ps[i] = Param{Numel: numel[idx], Dtype: pg.Float32}
	}
	got, lims, err := AssignBySize(ps, []int{100, 200}, order)
	if err != nil {
		t.Fatal(err)
	}
	// 3 (160 B) closes the 100 B bucket; 1+0+2 = 240 B closes the 200 B one.
	if want := [][]int{{3}, {1, 0, 2}}; !reflect.DeepEqual(got, want) || !reflect.DeepEqual(lims, []int{100, 200}) {
		t.Fatalf("got %v %v, want %v [100 200]", got, lims, want)
	}
}

func TestAssignBySizeErrors(t *testing.T) {
	ps := dense(pg.Float32, 1, 2)
	for name, call := range map[string]func() error{
		"no params":       func() error { _, _, err := AssignBySize(nil, []int{1}, nil); return err },
		"no limits":       func() error { _, _, err := AssignBySize(ps, nil, nil); return err },
		"short order":     func() error { _, _, err := AssignBySize(ps, []int{1}, []int{0}); return err },
		"repeated index":  func() error { _, _, err := AssignBySize(ps, []int{1}, []int{1, 1}); return err },
		"index too large": func() error { _, _, err := AssignBySize(ps, []int{1}, []int{0, 2}); return err },
		"negative numel": func() error {
			_, _, err := AssignBySize([]Param{{Numel: -1, Dtype: pg.Float32}}, []int{1}, nil)
			return err
		},
	} {
		if call() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// reference is a direct, unoptimised restatement of the algorithm: it
// keeps one list per (dtype, device) and re-derives each group's cursor
// from the number of buckets it has closed.
func reference(ps []Param, limits []int) [][]int {
	type key struct {
		dt  pg.Dtype
		dev int
	}
	var out [][]int
	open := map[key][]int{}
	size := map[key]int{}
	closed := map[key]int{}
	var seen []key
	for i, p := range ps {
		if p.ExpectSparse {
			out = append(out, []int{i})
			continue
		}
		k := key{p.Dtype, p.Device}
		if _, ok := open[k]; !ok && closed[k] == 0 {
			seen = append(seen, k)
		}
		open[k] = append(open[k], i)
		size[k] += p.Numel * int(p.Dtype.Size())
		if size[k] >= limits[min(closed[k], len(limits)-1)] {
			out = append(out, open[k])
			open[k], size[k] = nil, 0
			closed[k]++
		}
	}
	for _, k := range seen {
		if len(open[k]) > 0 {
			out = append(out, open[k])
		}
	}
	// sort by smallest index (insertion sort keeps this obviously right)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j][0] < out[j-1][0]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func TestAssignBySizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dts := []pg.Dtype{pg.Float32, pg.Float64}
	for trial := range 500 {
		n := 1 + rng.IntN(30)
		ps := make([]Param, n)
		for i := range ps {
			ps[i] = Param{Numel: rng.IntN(100), Dtype: dts[rng.IntN(2)], Device: rng.IntN(2), ExpectSparse: rng.IntN(10) == 0}
		}
		limits := []int{1 + rng.IntN(400), 1 + rng.IntN(800)}
		got, _, err := AssignBySize(ps, limits, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := reference(ps, limits); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: params %v limits %v:\n got %v\nwant %v", trial, ps, limits, got, want)
		}
	}
}

func ExampleAssignBySize() {
	// DDP's defaults: a 1 MiB first bucket, 25 MiB after that, parameters
	// in reverse order so the last layer's gradients (ready first) go first.
	numel := []int{784 * 512, 512, 512 * 512, 512, 512 * 10, 10} // fc1.w, fc1.b, fc2.w, ...
	var params []Param
	var order []int
	for i := len(numel) - 1; i >= 0; i-- {
		params = append(params, Param{Numel: numel[i], Dtype: pg.Float32})
		order = append(order, i)
	}
	buckets, limits, err := AssignBySize(params, []int{1 << 20, 25 << 20}, order)
	if err != nil {
		panic(err)
	}
	fmt.Println(buckets, limits)
	// Output: [[5 4 3 2] [1 0]] [1048576 26214400]
}
