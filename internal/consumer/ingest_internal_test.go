package consumer

import (
	"sync"
	"testing"
	"time"
)

// A bounded tenant's requests are stored one at a time; with as many
// waiting as its quota, the next is refused at once rather than taking
// another ingest slot; another tenant is not held up.
func TestSerializeRefusesPastTheQuotaWaiting(t *testing.T) {
	in := &Ingest{serial: map[string]*serial{}}
	unlock, ok := in.serialize("A", 2)
	if !ok {
		t.Fatal("the first request refused")
	}
	waiting := func() int {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.serial["A"].waiting
	}
	var wg sync.WaitGroup
	got := make(chan bool, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, ok := in.serialize("A", 2)
			got <- ok
			if ok {
				u()
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); waiting() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want 2", waiting())
		}
	}
	if _, ok := in.serialize("A", 2); ok {
		t.Fatal("a third waiting request was let wait")
	}
	ub, ok := in.serialize("B", 2)
	if !ok {
		t.Fatal("tenant B held up by A")
	}
	ub()
	unlock()
	wg.Wait()
	close(got)
	for ok := range got {
		if !ok {
			t.Fatal("a waiting request was refused once the lock was free")
		}
	}
	if waiting() != 0 {
		t.Fatalf("%d still counted waiting", waiting())
	}
}

// Issue 42: a tenant's publish ack showed the shared AGENT_CONTEXT
// sequence, which counts every tenant's requests. The tenant sees the
// stream and whether its request was a duplicate; an error as it is.
func TestTenantAckHidesTheSequence(t *testing.T) {
	got := string(tenantAck([]byte(`{"stream":"AGENT_CONTEXT","seq":4812,"duplicate":true}`)))
	if got != `{"stream":"AGENT_CONTEXT","duplicate":true}` {
		t.Fatalf("ack %s", got)
	}
	e := `{"error":{"code":503,"err_code":10077,"description":"maximum bytes exceeded"},"stream":"AGENT_CONTEXT"}`
	if got := string(tenantAck([]byte(e))); got != e {
		t.Fatalf("error ack %s", got)
	}
}
