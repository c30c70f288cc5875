package reducer

// actionKind is what the driver is told to do; perform has one case for
// each.
type actionKind uint8

const (
	actRebuild       actionKind = iota + 1 // replan the buckets in rank 0's ready order (order, carry)
	actInstallDevice                       // install the device twins of the current plan (final)
	actStore                               // put param's gradient into its bucket (sum)
	actZero                                // zero param's slot: a gradient that never came
	actUpload                              // send param's slot to its device twin
	actLaunch                              // run the comm hook on bucket (screen)
	actReduceUsed                          // start the used map's allreduce now: StaticGraph's first (unused)
	actWait                                // wait for every bucket in order, then the used map (reduceUsed)
	actAgreeOrigin                         // the ranks agree whether a NaN began on one (ownAllreduce)
	actWriteBack                           // write every result into its gradient (globalUsed)
	actReportOrigin                        // the iteration's error is where the NaN began (iteration)
	actCheckFinite                         // the iteration's error names non-finite results (iteration, usedByNone)
)

// action is one thing to do. Each field beyond kind has one meaning and
// belongs to the kinds named in its comment; the others leave it zero.
type action struct {
	kind actionKind

	param  int // store, zero, upload: the parameter
	bucket int // launch: the bucket

	sum          bool // store: add into the slot (inside an accumulation window) instead of copying
	carry        bool // rebuild: copy the window's sums into the new buckets
	final        bool // installDevice: registered twins, no rebuild to come; else plain ones
	screen       bool // launch: first zero and note a non-finite slot (Note [where the NaN began])
	reduceUsed   bool // wait: allreduce the used map after the buckets (Note [used map after the buckets])
	ownAllreduce bool // agreeOrigin: an allreduce of its own; else the flag rode on the used map's

	order      []int   // rebuild: this rank's complete gradient-ready order
	unused     []int   // reduceUsed: the parameters unused in the first iteration
	globalUsed []int32 // writeBack: the used map summed over ranks; nil: all used
	usedByNone []bool  // checkFinite: parameters no rank used, whose gradients are not results
	iteration  int     // reportOrigin, checkFinite: the synchronised iteration, counted from 1
}
