package keylock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/keylock"
)

// One holder at a time per key; other keys do not wait; a waiter whose
// context ends gives up and leaves the lock as it was; nothing is kept
// once every holder and waiter is gone.
func TestLocks(t *testing.T) {
	var l keylock.Locks
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside, most := 0, 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := l.Lock(ctx, "a")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(time.Millisecond / 10)
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d holders of one key at once", most)
	}
	unlock, _ := l.Lock(ctx, "a")
	other, err := l.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	other()
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Lock(short, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ended: %v", err)
	}
	if !l.Busy("a") || l.Busy("b") {
		t.Fatalf("busy a %v, b %v", l.Busy("a"), l.Busy("b"))
	}
	unlock()
	if l.Busy("a") {
		t.Fatal("a key nobody holds is kept")
	}
}
