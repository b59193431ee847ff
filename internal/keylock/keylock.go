// Package keylock lets one holder at a time work on a key (a session)
// within a process: a request waits its turn, or gives up when its
// context ends. Entries exist only while a key is held or waited for.
package keylock

import (
	"context"
	"sync"
)

// Locks is a set of locks by key; the zero value is ready.
type Locks struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	ch   chan struct{} // holds a token while the key is taken
	refs int           // the holder and its waiters: the entry goes at zero
}

// Lock takes key's lock, or gives up with ctx's error; unlock gives it
// back (once).
func (l *Locks) Lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*entry{}
	}
	e := l.m[key]
	if e == nil {
		e = &entry{ch: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// Busy reports whether key is held or waited for.
func (l *Locks) Busy(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[key]
	return ok
}
