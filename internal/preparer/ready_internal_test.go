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

// A session's rate carries over a read: an append just after it (under
// paceWindow) is paced on the rate the session had, an append or two
// soon after it weigh only their share of rateWindow, and past
// rateWindow the session's own growth since the read decides. Without a
// rate before the read, an append under paceWindow after it cannot be
// paced (and is prepared at once: what the carried rate is for).
func TestRateCarriesOverARead(t *testing.T) {
	p := New(nil, Options{})
	p.readyIn(2 * time.Second)
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	e := &estimate{read: t0, base: 7000, tokens: 7100, limit: 8000, biggest: 100, rate: 50}
	// 100 tokens in half a second after the read: a burst, weighed as
	// a twentieth of the window.
	if r := rateOf(e, t0.Add(500*time.Millisecond)); r < 50 || r > 60 {
		t.Fatalf("rate %.1f half a second after a read, want about 57 (50 before it)", r)
	}
	if c := p.pace(e, t0.Add(500*time.Millisecond), 0); c != "" {
		t.Fatalf("paced %q: 900 tokens left at about 57 a second is 16 s, over a 2 s preparation's margin", c)
	}
	// Past rateWindow, the growth since the read alone.
	e.tokens = 7400
	if r := rateOf(e, t0.Add(20*time.Second)); r != 20 {
		t.Fatalf("rate %.1f after 20 s and 400 tokens, want 20", r)
	}
	// No rate before the read: not paced under paceWindow.
	e.rate, e.tokens = 0, 7100
	if r := rateOf(e, t0.Add(500*time.Millisecond)); r != 0 {
		t.Fatalf("rate %.1f with none before the read, want 0", r)
	}
	if c := p.pace(e, t0.Add(500*time.Millisecond), 0); c != CauseUnpaced {
		t.Fatalf("paced %q with no rate, want %q", c, CauseUnpaced)
	}
	// Near the limit at that rate: due.
	e.rate, e.tokens = 50, 7850
	if c := p.pace(e, t0.Add(500*time.Millisecond), 0); c != CauseAppends && c != CausePace {
		t.Fatalf("150 tokens left at 50 a second: %q, want due", c)
	}
}
