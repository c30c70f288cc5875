package reducer

import (
	"fmt"

	"github.com/goddp/ddp/pg"
)

// event is what the driver tells the machine: Note [events in, actions
// out]. Each is a value type; step switches on it.
type event interface{ isEvent() }

// evBegin is Prepare: an iteration starts, synchronised or not, with the
// parameters the caller says the loss does not reach.
type evBegin struct {
	sync   bool
	unused []int
}

// evBegan: Prepare's actions are done; the iteration opens. hostOnly: the
// group keeps no device buckets after them (the comm hook has no device
// form), so the twins the machine asked for were not made.
type evBegan struct{ hostOnly bool }

// evReady is MarkReady: parameter param's gradient arrived.
type evReady struct {
	param int
	grad  pg.Tensor // read for its dtype, length and place, never its data
}

// evFinish is Finalize: backward is over.
type evFinish struct{}

// evWaited: every bucket's communication (and the used map's) is done.
// globalUsed is the used map summed over ranks, nil when it was not
// allreduced; origin, whether the ranks agreed that a NaN or an infinity
// was found before a collective (Note [where the NaN began]).
type evWaited struct {
	globalUsed []int32
	origin     bool
}

// evDone: Finalize's write back is done; the iteration closes.
type evDone struct{}

// evFail: a fatal error (a collective failed, backward failed, Close).
type evFail struct{ err error }

// evReplanned: the driver made a new bucket plan concrete (the rebuild).
type evReplanned struct{ plan [][]int }

// evJoin: under a Join, some rank has run out of inputs (othersJoined), or
// Finish made the replicas equal again.
type evJoin struct{ othersJoined bool }

func (evBegin) isEvent()     {}
func (evBegan) isEvent()     {}
func (evReady) isEvent()     {}
func (evFinish) isEvent()    {}
func (evWaited) isEvent()    {}
func (evDone) isEvent()      {}
func (evFail) isEvent()      {}
func (evReplanned) isEvent() {}
func (evJoin) isEvent()      {}

// status is a snapshot of the machine, the only way the driver reads it.
// Its slices are the machine's, which replaces them rather than writing
// them in place; a caller that hands one out copies it.
type status struct {
	phase        phase
	busyIn       string // busy: "Prepare" or "Finalize"
	err          error  // failed: the first fatal error
	iterations   int    // completed synchronised iterations
	ready        int    // parameters marked ready in this iteration
	params       int
	launched     int // buckets launched in this iteration
	buckets      int
	window       bool // an accumulation window is open
	othersJoined bool
	devices      bool      // the group keeps device buckets
	twins        twinState // the device twins that serve the current plan
	stage        rebuildStage
	readyOrder   []int  // the complete recorded order, once there is one
	globalUnused []bool // no rank used it in the last synchronised iteration; nil: all used
	staticUnused []bool // StaticGraph: unused on this rank in the first iteration; nil before it
}

func (m *machine) status() status {
	return status{
		phase: m.phase, busyIn: m.busyIn, err: m.err, iterations: m.num,
		ready: m.t.numReady, params: len(m.params), launched: m.t.next, buckets: len(m.t.pending),
		window: m.window, othersJoined: m.othersJoined, devices: m.devices, twins: m.twins,
		stage: m.stage, readyOrder: m.complete,
		globalUnused: m.globalUnused, staticUnused: m.staticUnused,
	}
}

// usable says why an event that changes the iteration cannot be taken now.
func (s status) usable() error {
	switch s.phase {
	case phaseFailed:
		return s.err
	case phaseBusy:
		return fmt.Errorf("reducer: %s is waiting for communication; Prepare, MarkReady and Finalize must not overlap it",
			s.busyIn)
	}
	return nil
}

// fatal reports whether err is the machine's fatal error, as opposed to a
// refusal that leaves the reducer usable.
func (s status) fatal(err error) bool { return err != nil && s.phase == phaseFailed && s.err == err }
