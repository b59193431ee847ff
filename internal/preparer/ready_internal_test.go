package preparer

import (
	"testing"
	"time"
)

// The pacing goes by the slow preparations of the last 20: where half
// take two model calls, what a preparation takes is what those take;
// once the slow ones are 20 preparations old, the fast ones set it.
func TestReadyGoesByTheSlowPreparations(t *testing.T) {
	p := New(nil, Options{})
	for i := range 10 {
		d := 2 * time.Second
		if i%2 == 1 {
			d = 4 * time.Second
		}
		p.readyIn(d)
	}
	if got := p.Stats().ReadyMS; got != 4000 {
		t.Fatalf("ready in %d ms with half the preparations taking 4 s, want 4000", got)
	}
	for range readyWindow {
		p.readyIn(2 * time.Second)
	}
	if got := p.Stats().ReadyMS; got != 2000 {
		t.Fatalf("ready in %d ms after %d preparations of 2 s, want 2000", got, readyWindow)
	}
}
