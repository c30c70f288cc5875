package backend

import (
	"sync"

	"github.com/goddp/ddp/pg"
)

// Completions is the completion-hook dispatcher backends embed to
// implement CompletionHooker: Deliver queues a WorkInfo without blocking,
// and one goroutine, started by the first Register, calls the hooks in
// order. The zero value is ready; Close stops the goroutine after the
// queue drains and drops later deliveries.
type Completions struct {
	mu      sync.Mutex
	hooks   []func(pg.WorkInfo)
	queue   []pg.WorkInfo
	kick    chan struct{}
	exited  chan struct{}
	closed  bool
	running bool
}

// Register adds a hook. Hooks registered after Close are never called.
func (c *Completions) Register(hook func(pg.WorkInfo)) {
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
func (c *Completions) Deliver(info pg.WorkInfo) {
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
