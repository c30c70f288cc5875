package reducer

import (
	"github.com/goddp/ddp/bucket"
	"github.com/goddp/ddp/timeline"
)

// trace writes the iteration's events to the timeline.
func (o *liveObserver) trace(r *Reducer, bwdStart, end int64, sync bool) {
	e := timeline.Event{Name: "step", Lane: timeline.LaneStep, Start: o.at(o.fwdStart), End: o.at(end)}
	e.Args[0] = timeline.Arg{Key: "iteration", Value: int64(o.iterations)}
	e.Args[1] = timeline.Arg{Key: "sync", Value: b2i(sync)}
	o.tl.Write(&e)
	if s := o.bwdStart.Load(); s != 0 {
		o.tl.Write(&timeline.Event{Name: "forward", Lane: timeline.LaneCompute, Start: o.at(o.fwdStart), End: o.at(s)})
	}
	o.tl.Write(&timeline.Event{Name: "backward", Lane: timeline.LaneCompute, Start: o.at(bwdStart),
		End: o.at(o.bwdEnd.Load())})
	for i, c := range o.copies {
		if c.start == 0 {
			continue
		}
		e := timeline.Event{Name: "copy", Lane: timeline.LaneReducer, Start: o.at(c.start), End: o.at(c.end)}
		e.Args[0] = timeline.Arg{Key: "param", Value: int64(i)}
		e.Args[1] = timeline.Arg{Key: "bucket", Value: int64(r.layout.bucketOf[i])}
		o.tl.Write(&e)
	}
	for b, t := range o.buckets {
		if !t.launched {
			continue
		}
		o.bucketEvent("launch", timeline.LaneReducer, b, t.launch, r.layout.buckets[b])
		if t.done != 0 {
			o.bucketEvent("communication", timeline.LaneBucket+b, b, span{t.launch.end, t.done}, r.layout.buckets[b])
		}
		if t.wait.start != 0 {
			o.bucketEvent("wait", timeline.LaneReducer, b, t.wait, r.layout.buckets[b])
		}
	}
}

func (o *liveObserver) bucketEvent(name string, lane, b int, s span, bk *bucket.Bucket) {
	e := timeline.Event{Name: name, Lane: lane, Start: o.at(s.start), End: o.at(s.end)}
	e.Args[0] = timeline.Arg{Key: "bucket", Value: int64(b)}
	e.Args[1] = timeline.Arg{Key: "bytes", Value: int64(bk.Bytes())}
	o.tl.Write(&e)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
