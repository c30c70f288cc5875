package instrument

import "github.com/goddp/ddp/pg"

// Inner is the wrapped group, so that callers can find what it
// implements beyond pg.ProcessGroup (the reducer looks for
// pg.DeviceBucketAllocator through wrappers).
func (g *group) Inner() pg.ProcessGroup { return g.ProcessGroup }
