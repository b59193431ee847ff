package session_test

import (
	"testing"
	"time"

	"github.com/compactor/compactor/internal/session"
)

// A claim holds while its owner is heard from: started, or renewed by a
// heartbeat, less than ttl ago. An owner that died stops renewing it.
func TestClaimHoldsWhileItsOwnerBeats(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	p := &session.PreparedCompaction{State: session.PreparedRunning, StartedAt: start}
	const ttl = 3 * time.Second
	if !p.Claimed(start.Add(2*time.Second), ttl) || p.Claimed(start.Add(4*time.Second), ttl) {
		t.Fatal("an unrenewed claim must hold for ttl after its start, and no longer")
	}
	p.Heartbeat = start.Add(10 * time.Second)
	if !p.Claimed(start.Add(12*time.Second), ttl) || p.Claimed(start.Add(14*time.Second), ttl) {
		t.Fatal("a heartbeat must renew the claim for ttl")
	}
	p.State = session.PreparedReady
	if p.Claimed(start.Add(11*time.Second), ttl) {
		t.Fatal("a ready preparation is not a claim")
	}
	var none *session.PreparedCompaction
	if none.Claimed(start, ttl) {
		t.Fatal("no preparation is no claim")
	}
}
