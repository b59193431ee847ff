package api

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// run never waits for a worker: as many operations as are given run at
// once; idle workers take the next ones instead of new goroutines, and
// end once idle long enough.
func TestWorkersRunAtOnceAndAreKept(t *testing.T) {
	base := runtime.NumGoroutine()
	w := newWorkers(time.Hour)
	const n = 50
	var started, done sync.WaitGroup
	release := make(chan struct{})
	started.Add(n)
	done.Add(n)
	for range n {
		w.run(func() { started.Done(); <-release; done.Done() })
	}
	started.Wait() // all n at once: none waited for another
	close(release)
	done.Wait()
	for range 1000 {
		ran := make(chan struct{})
		w.run(func() { close(ran) })
		<-ran
	}
	if g := runtime.NumGoroutine() - base; g > n {
		t.Fatalf("%d goroutines for %d workers: the idle workers were not given the next operations", g, n)
	}

	before := runtime.NumGoroutine()
	short := newWorkers(time.Millisecond)
	var all sync.WaitGroup
	all.Add(10)
	for range 10 {
		short.run(func() { all.Done(); all.Wait() }) // ten at once: ten workers
	}
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left: idle workers do not end", runtime.NumGoroutine()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Stopped, the workers end at once, however long their idle time.
	before = runtime.NumGoroutine()
	kept := newWorkers(time.Hour)
	var busy sync.WaitGroup
	busy.Add(10)
	for range 10 {
		kept.run(func() { busy.Done(); busy.Wait() })
	}
	busy.Wait()
	kept.stop()
	ran := make(chan struct{})
	kept.run(func() { close(ran) }) // after stop: still runs
	<-ran
	for deadline := time.Now().Add(time.Minute); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after stop", runtime.NumGoroutine()-before)
		}
	}
}
