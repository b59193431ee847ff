package recall

import (
	"container/list"
	"sync"
)

// Cache holds the indexes of the sessions searched lately, within a
// bound on their memory: the least recently used go first, and are built
// again from the store when searched again.
type Cache struct {
	max   int
	mu    sync.Mutex
	byKey map[string]*list.Element
	lru   *list.List // of *Entry, most recent first
	bytes int
}

// Entry is one session's index and what it was built from. Its lock
// serialises the work on it (catching up, searching).
type Entry struct {
	mu  sync.Mutex
	key string
	// Index is nil until built.
	Index *Index
	// Epoch is the session incarnation the index is of: a session
	// deleted and created again is indexed anew.
	Epoch string
	// CompactionID is the compaction in force when Cleared was read, and
	// Cleared the seqs its context shows cleared.
	CompactionID string
	Cleared      map[int64]bool
	bytes        int
}

// NewCache returns a cache of at most maxBytes of indexes (at least one
// index is kept whatever its size).
func NewCache(maxBytes int) *Cache {
	return &Cache{max: maxBytes, byKey: map[string]*list.Element{}, lru: list.New()}
}

// With runs f on key's entry, locked; the entry's size is taken again
// after f, and other entries evicted to keep the bound.
func (c *Cache) With(key string, f func(e *Entry) error) error {
	c.mu.Lock()
	el, ok := c.byKey[key]
	if !ok {
		el = c.lru.PushFront(&Entry{key: key})
		c.byKey[key] = el
	} else {
		c.lru.MoveToFront(el)
	}
	e := el.Value.(*Entry)
	c.mu.Unlock()
	e.mu.Lock()
	err := f(e)
	size := 0
	if e.Index != nil {
		size = e.Index.Bytes()
	}
	e.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.byKey[key]; ok && cur == el {
		c.bytes += size - e.bytes
		e.bytes = size
	}
	for c.bytes > c.max && c.lru.Len() > 1 {
		last := c.lru.Back()
		if last == el {
			break
		}
		old := last.Value.(*Entry)
		c.lru.Remove(last)
		delete(c.byKey, old.key)
		c.bytes -= old.bytes
	}
	return err
}

// Drop forgets key's index (a deleted session).
func (c *Cache) Drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.bytes -= el.Value.(*Entry).bytes
		c.lru.Remove(el)
		delete(c.byKey, key)
	}
}

// Stats are how many indexes the cache holds and their bytes.
func (c *Cache) Stats() (indexes, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}
