package ddp

// Close releases what the wrapper holds beyond Go memory: on an NCCL
// group, the reducer's device buckets and their NCCL registrations
// (reducer.Reducer.Close). Training cannot go on after it. It does not
// close the process group.
func (d *DDP) Close() error { return d.r.Close() }
