package api

import (
	"errors"
	"fmt"
	"sync"
)

// slots are the workers of the session and breaker operations, shared
// fairly by the tenants: while a quarter of them is free any operation
// takes one; past that only a tenant holding less than its fair share does
// (the slots over the tenants holding some, itself counted, and one more:
// one tenant alone keeps half free for the next), and the others are
// refused at once (429, retry) rather than queued. Queued, they held the
// endpoint's dispatch, and with it every other tenant's requests: beside
// tenant A's flood of appends, tenant B's append p99 rose 29 times.
type slots struct {
	mu    sync.Mutex
	max   int
	total int
	held  map[string]int
}

func newSlots(n int) *slots { return &slots{max: max(n, 1), held: map[string]int{}} }

// errBusy: the tenant holds its share of the workers while they are
// contended.
var errBusy = errors.New("busy")

// take takes a slot for tenant t, or says why not.
func (p *slots) take(t string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total >= p.max*3/4 {
		tenants := len(p.held) + 1
		if p.held[t] == 0 {
			tenants++
		}
		if share := max(p.max/tenants, 1); p.held[t] >= share || p.total >= p.max {
			return fmt.Errorf("%w: tenant %s holds %d of the %d workers, all but %d taken (its fair share is %d): retry", errBusy, t, p.held[t], p.max, p.max-p.total, share)
		}
	}
	p.total++
	p.held[t]++
	return nil
}

// give hands tenant t's slot back.
func (p *slots) give(t string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total--
	if p.held[t]--; p.held[t] <= 0 {
		delete(p.held, t)
	}
}
