package pg

import (
	"sync"
	"time"
)

// WorkInfo describes a finished Work, as c10d's WorkInfo: what the
// completion hooks of a CompletionHooker receive.
type WorkInfo struct {
	Op    OpType
	Seq   uint64 // Work.Seq
	Rank  int    // the reporting rank in its group
	Dtype Dtype  // 0 for barriers
	// InBytes and OutBytes are the sizes of this rank's input and output
	// buffers (for in-place collectives, both are the tensor's size; for
	// coalesced ones, the sums).
	InBytes, OutBytes int64
	// Issued is when the call was made, Started when the backend began
	// it (after the collectives before it), Finished when it completed.
	Issued, Started, Finished time.Time
	Err                       error // nil on success
}

// QueueDuration is how long the Work waited behind earlier ones.
func (w WorkInfo) QueueDuration() time.Duration { return nonNegative(w.Started.Sub(w.Issued)) }

// ActiveDuration is how long the Work ran, c10d's activeDuration.
func (w WorkInfo) ActiveDuration() time.Duration { return nonNegative(w.Finished.Sub(w.Started)) }

// Duration is QueueDuration plus ActiveDuration.
func (w WorkInfo) Duration() time.Duration { return nonNegative(w.Finished.Sub(w.Issued)) }

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// Completions is the completion-hook dispatcher backends embed to
// implement CompletionHooker: Deliver queues a WorkInfo without blocking,
// and one goroutine, started by the first Register, calls the hooks in
// order. The zero value is ready; Close stops the goroutine after the
// queue drains and drops later deliveries.
type Completions struct {
	mu      sync.Mutex
	hooks   []func(WorkInfo)
	queue   []WorkInfo
	kick    chan struct{}
	exited  chan struct{}
	closed  bool
	running bool
}

// Register adds a hook. Hooks registered after Close are never called.
func (c *Completions) Register(hook func(WorkInfo)) {
	if hook == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.hooks = append(c.hooks, hook)
	if !c.running {
		c.running = true
		c.kick = make(chan struct{}, 1)
		c.exited = make(chan struct{})
		go c.loop()
	}
}

// Active reports whether any hook is registered, so that backends can skip
// building WorkInfos nobody reads.
func (c *Completions) Active() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hooks) > 0 && !c.closed
}

// Deliver queues info for the hooks. It never blocks.
func (c *Completions) Deliver(info WorkInfo) {
	c.mu.Lock()
	if c.closed || len(c.hooks) == 0 {
		c.mu.Unlock()
		return
	}
	c.queue = append(c.queue, info)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Close delivers what is queued, stops the goroutine and waits for it.
// It is idempotent.
func (c *Completions) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	running := c.running
	c.mu.Unlock()
	if running {
		select {
		case c.kick <- struct{}{}:
		default:
		}
		<-c.exited
	}
}

func (c *Completions) loop() {
	defer close(c.exited)
	for range c.kick {
		for {
			c.mu.Lock()
			batch := c.queue
			c.queue = nil
			hooks := c.hooks
			closed := c.closed
			c.mu.Unlock()
			for _, info := range batch {
				for _, h := range hooks {
					h(info)
				}
			}
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
		}
	}
}
