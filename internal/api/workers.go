package api

import (
	"sync"
	"time"
)

// workers run the endpoints' operations on goroutines kept between them.
// An operation grows its goroutine's stack (decoding the body, the store,
// encoding the answer) to tens of kilobytes; a new goroutine for each
// request grew it again every time, some 8 % of the CPU of appends through
// the endpoint (make scale's profile). A worker waits idle for its next
// operation, then ends: how many live follows how many run at once, which
// the slots and the compaction semaphore bound.
type workers struct {
	next chan func()
	idle time.Duration
	quit chan struct{} // closed by stop: workers end once idle
	once sync.Once
}

func newWorkers(idle time.Duration) *workers {
	return &workers{next: make(chan func()), idle: idle, quit: make(chan struct{})}
}

// stop ends the idle workers, and each busy one after its operation (one
// run after stop still runs, on a goroutine of its own).
func (w *workers) stop() { w.once.Do(func() { close(w.quit) }) }

// run runs f on a waiting worker, or on a new one when none waits.
func (w *workers) run(f func()) {
	select {
	case w.next <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	f()
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		select {
		case f := <-w.next:
			f()
			t.Reset(w.idle)
		case <-t.C:
			return
		case <-w.quit:
			return
		}
	}
}
