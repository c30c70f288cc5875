package reducer

import (
	"slices"

	"github.com/goddp/ddp/bucket"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// layout is one bucket plan made concrete: the buckets with their flat
// buffers, the GradBucket each hook call receives (built once, reused
// every iteration), and where each parameter lives.
type layout struct {
	buckets  []*bucket.Bucket
	grads    []commhook.GradBucket
	works    []pg.Work
	bucketOf []int // parameter -> bucket
	slotOf   []int // parameter -> position in its bucket
}

// assign plans buckets for the parameters taken in the given order. For
// the initial plan (ordered false) the order is the model's, the buckets
// come back sorted by smallest index, and, as in DDP, their order is then
// reversed, since gradients become ready roughly last layer first. A
// rebuild passes the gradient-ready order (ordered true), which is kept.
func (r *Reducer) assign(order []int, limits []int, ordered bool) ([][]int, []int, error) {
	ps := make([]bucket.Param, len(order))
	for i, idx := range order {
		ps[i] = bucket.Param{Numel: r.numel[idx], Dtype: r.dtypes[idx]}
	}
	var idx []int
	if ordered {
		idx = order
	}
	plan, lims, err := bucket.AssignBySize(ps, limits, idx)
	if err != nil {
		return nil, nil, err
	}
	if !ordered {
		slices.Reverse(plan)
		slices.Reverse(lims)
	}
	return plan, lims, nil
}

// newLayout makes plan concrete: buckets, their buffers and hook views.
func (r *Reducer) newLayout(plan [][]int, limits []int) *layout {
	l := &layout{
		bucketOf: make([]int, len(r.params)),
		slotOf:   make([]int, len(r.params)),
		works:    make([]pg.Work, len(plan)),
	}
	for b, idx := range plan {
		bk := r.newBucket(b, idx, limits[b]) // hostbuf.go
		l.buckets = append(l.buckets, bk)
		views := make([]commhook.ParamView, len(idx))
		for j, p := range idx {
			l.bucketOf[p], l.slotOf[p] = b, j
			views[j] = commhook.ParamView{Index: p, Name: r.params[p].Name, Shape: r.params[p].Shape, Offset: bk.Offsets[j],
				Len: bk.Lengths[j]}
		}
		l.grads = append(l.grads, commhook.GradBucket{Index: b, Buffer: bk.Buffer, Params: views, IsLast: b == len(plan)-1})
	}
	return l
}

// view is parameter i's slice of its bucket.
func (l *layout) view(i int) pg.Tensor {
	return l.buckets[l.bucketOf[i]].View(l.slotOf[i])
}

func (l *layout) plan() [][]int {
	out := make([][]int, len(l.buckets))
	for i, b := range l.buckets {
		out[i] = slices.Clone(b.Params)
	}
	return out
}

func (l *layout) bucketBytes() []int {
	out := make([]int, len(l.buckets))
	for i, b := range l.buckets {
		out[i] = b.Bytes()
	}
	return out
}
