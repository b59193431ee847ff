package api

import (
	"errors"
	"testing"
)

// Issue 42: a tenant's flood held every worker of the endpoints, and the
// others' requests queued behind it. Under contention a tenant keeps to
// its fair share and the others find room.
func TestSlotsAreShared(t *testing.T) {
	p := newSlots(16)
	took := 0
	for p.take("A") == nil {
		took++
	}
	// Alone, A takes what is free up to three quarters, then half: the
	// rest stays for the next tenant.
	if took != 12 {
		t.Fatalf("tenant A alone took %d of 16 workers, want 12", took)
	}
	if err := p.take("A"); !errors.Is(err, errBusy) {
		t.Fatalf("A over its share: %v", err)
	}
	for i := range 4 {
		if err := p.take("B"); err != nil {
			t.Fatalf("tenant B's worker %d beside A's flood: %v", i+1, err)
		}
	}
	if err := p.take("C"); !errors.Is(err, errBusy) {
		t.Fatalf("C with every worker taken: %v", err)
	}
	// A's work ends: B and C find room before A does again.
	for range 6 {
		p.give("A")
	}
	if err := p.take("C"); err != nil {
		t.Fatalf("C once A gave workers back: %v", err)
	}
	if err := p.take("A"); err != nil { // 12 of 16 taken after this one
		t.Fatalf("A with a quarter free: %v", err)
	}
	// Contended again: with three tenants holding workers, the share is
	// 16 over 4; A (7) and B (4) hold it, C (1) does not.
	if err := p.take("A"); !errors.Is(err, errBusy) {
		t.Fatalf("A over its share: %v", err)
	}
	if err := p.take("B"); !errors.Is(err, errBusy) {
		t.Fatalf("B at its share: %v", err)
	}
	if err := p.take("C"); err != nil {
		t.Fatalf("C under its share: %v", err)
	}
	// Uncontended, anyone takes.
	q := newSlots(16)
	for i := range 11 {
		if err := q.take("A"); err != nil {
			t.Fatalf("take %d of an idle pool: %v", i, err)
		}
	}
}
