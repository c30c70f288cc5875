package instrument

import "github.com/goddp/ddp/pg"

// Inner is the wrapped group, so that pg.As finds what it implements
// beyond what the wrapper measures (see Wrap).
func (g *group) Inner() pg.ProcessGroup { return g.ProcessGroup }
