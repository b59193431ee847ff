package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
)

// queuedMsg is a delivery as hold sees one: its subject names the session.
type queuedMsg struct {
	jetstream.Msg // the rest is not called
	subject       string
	n             int
}

func (m *queuedMsg) Subject() string { return m.subject }

// A session's deliveries are worked one at a time, each once, however
// they arrive against its runner's end: a delivery held just as the
// runner takes the session's last one off its queue starts one runner,
// never two (two would answer the same delivery twice, side by side).
func TestSessionQueueRunsEachDeliveryOnceInTurn(t *testing.T) {
	const sessions, each = 4, 5000
	c := &Consumer{log: slog.New(slog.DiscardHandler), queues: map[string][]*delivery{}, held: map[*delivery]struct{}{}, freed: make(chan struct{}, 1)}
	var running [sessions]atomic.Int32
	var mu sync.Mutex
	seen := map[*queuedMsg]int{}
	var overlaps atomic.Int64
	c.work = func(_ context.Context, d *delivery) {
		m := d.msg.(*queuedMsg)
		var s int
		fmt.Sscanf(d.sessionID, "s%d", &s)
		if running[s].Add(1) > 1 {
			overlaps.Add(1)
		}
		if m.n%3 == 0 {
			runtime.Gosched() // a longer answer now and then
		}
		mu.Lock()
		seen[m]++
		mu.Unlock()
		running[s].Add(-1)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var sent []*queuedMsg
	var sentMu sync.Mutex
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				m := &queuedMsg{subject: contract.OverBudgetPrefix + fmt.Sprintf("s%d", s), n: n}
				sentMu.Lock()
				sent = append(sent, m)
				sentMu.Unlock()
				c.hold(ctx, m)
				if n%2 == 0 {
					runtime.Gosched() // let the runner drain its queue
				}
			}
		}()
	}
	wg.Wait()
	c.wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d deliveries were worked while another of their session was", n)
	}
	for _, m := range sent {
		if seen[m] != 1 {
			t.Fatalf("delivery %d of %s worked %d times", m.n, m.subject, seen[m])
		}
	}
	if len(c.queues) != 0 || len(c.held) != 0 {
		t.Fatalf("left %d queues, %d held", len(c.queues), len(c.held))
	}
}
