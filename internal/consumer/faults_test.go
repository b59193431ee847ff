package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
)

// Issue 11, third defect: a model slower than AckWait (3 s against 2 s),
// more requests than the replicas work on at once: nothing pulled is left
// unattended to be redelivered to the other replica. Each request is
// summarised once (one model call each), and a core subscriber sees one
// result per request.
func TestSlowModelIsNotDoneTwice(t *testing.T) {
	e := newEnv(t)
	fp, sum := e.provider(func(string) fakeprovider.Action { return fakeprovider.Action{Delay: 3 * time.Second} })
	const n = 8
	for i := range n {
		e.importSession(fmt.Sprintf("s%d", i), 3000, chat(40))
	}
	seen := e.coreResults()
	a := e.start(sum, openAIConfig(), consumer.Options{Workers: 2})
	b := e.start(sum, openAIConfig(), consumer.Options{Workers: 2})
	for i := range n {
		e.request(fmt.Sprintf("evt-%d", i), contract.TypeContextOverBudget, fmt.Sprintf("s%d", i), false)
	}
	e.waitFor("every result", 40*time.Second, func() bool { return len(seen()) == n })
	time.Sleep(2 * testAckWait) // what would be redelivered has been by now
	for id, count := range seen() {
		if count != 1 {
			t.Errorf("result %s seen %d times by a core subscriber", id, count)
		}
	}
	if calls, _, _, _ := fp.Stats(); calls != n {
		t.Errorf("%d model calls for %d requests", calls, n)
	}
	if got := a.cons.Stats().Received + b.cons.Stats().Received; got != n {
		t.Errorf("%d deliveries for %d requests", got, n)
	}
}

// Issue 11, fourth defect: model calls that hang (here 10, more than the 8
// workers a process used to have) do not stall other sessions: the 10
// others are answered while the hanging calls still hang, and those are
// answered once the model comes back.
func TestHangingCallsDoNotStallOtherSessions(t *testing.T) {
	e := newEnv(t)
	fp, sum := e.provider(func(prompt string) fakeprovider.Action {
		return fakeprovider.Action{Hang: strings.Contains(prompt, "HANG-MARKER")}
	})
	for i := range 10 {
		msgs := chat(40)
		msgs[1].Content = session.TextContent("HANG-MARKER " + msgs[1].Content.Text)
		e.importSession(fmt.Sprintf("hang%d", i), 3000, msgs)
		e.importSession(fmt.Sprintf("ok%d", i), 3000, chat(40))
	}
	e.start(sum, openAIConfig(), consumer.Options{})
	for i := range 10 {
		e.request(fmt.Sprintf("evt-hang%d", i), contract.TypeContextOverBudget, fmt.Sprintf("hang%d", i), false)
	}
	e.waitFor("the hanging calls", 10*time.Second, func() bool { _, _, hung, _ := fp.Stats(); return hung == 10 })
	for i := range 10 {
		e.request(fmt.Sprintf("evt-ok%d", i), contract.TypeContextOverBudget, fmt.Sprintf("ok%d", i), false)
	}
	for i := range 10 {
		if got := e.resultsFor(fmt.Sprintf("ok%d", i), 1, 10*time.Second, contract.TypeCompactionCompleted); len(got) != 1 {
			t.Fatalf("ok%d not answered while other sessions' calls hang: %+v", i, got)
		}
	}
	if _, _, hung, _ := fp.Stats(); hung != 10 {
		t.Fatalf("%d calls hung", hung)
	}
	fp.Release()
	for i := range 10 {
		if got := e.resultsFor(fmt.Sprintf("hang%d", i), 1, 10*time.Second, contract.TypeCompactionCompleted); len(got) != 1 {
			t.Fatalf("hang%d after the model came back: %+v", i, got)
		}
	}
}

// Issue 11, seventh defect: a record that does not decode fails at once,
// with a clear reason: CompactionFailed (corrupt_session, not retryable)
// and a dead letter; no redelivery (it used to be retried for minutes).
func TestCorruptSessionFailsAtOnce(t *testing.T) {
	e := newEnv(t)
	bucket, key, err := e.store.RecordKey(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := e.js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, []byte(`{"session_id":"s1","head_seq":"three"}`)); err != nil {
		t.Fatal(err)
	}
	r := e.start(nil, openAIConfig(), consumer.Options{})
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	got := e.resultsFor("s1", 1, 5*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Data["reason"] != "corrupt_session" || got[0].Data["retryable"] != false || !strings.Contains(got[0].Data["error"].(string), "record does not decode") {
		t.Fatalf("results %+v", got)
	}
	e.waitFor("the dead letter", 5*time.Second, func() bool { return len(e.streamEvents(consumer.DLQStream)) == 1 })
	if m := e.streamEvents(consumer.DLQStream)[0]; !strings.Contains(m.Header.Get(consumer.HeaderReason), "corrupt_session") {
		t.Fatalf("dead letter reason %q", m.Header.Get(consumer.HeaderReason))
	}
	if st := r.cons.Stats(); st.Retried != 0 || st.Received != 1 {
		t.Fatalf("stats %+v: a corrupt session was retried", st)
	}
}

// A replica that published a request's result and died before
// acknowledging it: the redelivery does not publish the result again (the
// stream would keep one, but a core subscriber would see two), and the
// request is acknowledged.
func TestRedeliveryDoesNotRepublish(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	seen := e.coreResults()
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	// The replica that dies: it takes the delivery, compacts, publishes,
	// and never acknowledges.
	cons, err := e.js.Consumer(context.Background(), consumer.RequestStream, consumer.Durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := <-batch.Messages(); !ok {
		t.Fatal("no delivery")
	}
	svc, err := pipeline.New(e.store, e.breakers, extractive.New(e.counter), pipeline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Compact(context.Background(), pipeline.Request{ID: "evt-1", SessionID: "s1", Trigger: pipeline.TriggerOverBudget})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&events.Publisher{JS: e.js, Stream: consumer.ResultStream}).Result(context.Background(), res); err != nil {
		t.Fatal(err)
	}
	r := e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	e.waitFor("the redelivery answered", 10*time.Second, func() bool { return r.cons.Stats().Completed == 1 && e.pendingRequests() == 0 })
	time.Sleep(200 * time.Millisecond)
	if n := seen()[contract.RequestResultID("evt-1")]; n != 1 {
		t.Fatalf("a core subscriber saw the result %d times", n)
	}
	if got := e.resultsFor("s1", 1, time.Second, contract.TypeCompactionCompleted); len(got) != 1 || got[0].Data["outcome"] != "compacted" {
		t.Fatalf("stored results %+v", got)
	}
}

// Issue 42: a request answered CompactionFailed whose acknowledgement was
// lost (a leader change, its replica killed after publishing) is delivered
// again after the session grew. The redelivery answers with the result
// already published: it is acknowledged, nothing is compacted and no
// CompactionCompleted follows the failure (the stream kept both).
func TestRedeliveryAfterAFailureAnswersWithIt(t *testing.T) {
	e := newEnv(t)
	e.importSession("grown", 3000, chat(40))
	e.request("evt-answered", contract.TypeContextOverBudget, "grown", false)
	// A replica took it, published its failure and died before acking.
	ctx := context.Background()
	cons, err := e.js.Consumer(ctx, consumer.RequestStream, consumer.Durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++
	}
	if got != 1 {
		t.Fatalf("fetched %d requests, want the one", got)
	}
	pub := &events.Publisher{JS: e.js, Stream: consumer.ResultStream}
	if err := pub.Result(ctx, &pipeline.Result{SessionID: "grown", RequestID: "evt-answered", Trigger: pipeline.TriggerOverBudget, Failed: true,
		Reason: pipeline.ReasonSummaryFailed, Retryable: true, Error: "summary model answered 503"}); err != nil {
		t.Fatal(err)
	}
	r := e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	e.waitFor("the redelivery acknowledged", 3*testAckWait+10*time.Second, func() bool { return e.pendingRequests() == 0 })
	all := e.resultsFor("grown", 1, 5*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(all) != 1 || all[0].Type != contract.TypeCompactionFailed {
		t.Fatalf("results stored for the request: %+v, want only the failure published before", all)
	}
	if n := e.compactions("grown"); n != 0 {
		t.Fatalf("the redelivery compacted the session (%d compactions)", n)
	}
	if st := r.cons.Stats(); st.Received != 1 {
		t.Fatalf("%d deliveries received, want the one redelivery", st.Received)
	}
}

// Issue 42: a storage blip at a request's fourth delivery cost a 2-minute
// redelivery delay. The delays stay within seconds whatever the delivery.
func TestRetryDelaysStayShort(t *testing.T) {
	for delivered := uint64(1); delivered <= 10; delivered++ {
		for range 20 {
			if d := consumer.DefaultRetryDelay(delivered); d < 800*time.Millisecond || d > 12*time.Second {
				t.Fatalf("delivery %d: delay %v, want 0.8 s to 12 s", delivered, d)
			}
		}
	}
}

// Issue 42: a replica paused mid-work (SIGSTOP) stops heartbeating its
// request, which is delivered again to another replica and answered
// there; resumed, the first replica finished its work and published a
// second result of the other kind (make chaos found a request with a
// failure and a completion). Work held past the ack wait reads the result
// stream before publishing: the first result stands.
func TestWorkPastTheAckWaitKeepsTheFirstResult(t *testing.T) {
	e := newEnv(t)
	e.importSession("paused", 3000, chat(40))
	called := make(chan struct{}, 1)
	fp, sum := e.provider(func(string) fakeprovider.Action {
		select {
		case called <- struct{}{}:
		default:
		}
		return fakeprovider.Action{Delay: testAckWait + time.Second}
	})
	e.start(sum, openAIConfig(), consumer.Options{})
	e.request("evt-paused", contract.TypeContextOverBudget, "paused", false)
	select {
	case <-called:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was not called")
	}
	// Meanwhile the request, delivered again elsewhere, failed there.
	pub := &events.Publisher{JS: e.js, Stream: consumer.ResultStream}
	if err := pub.Result(context.Background(), &pipeline.Result{SessionID: "paused", RequestID: "evt-paused", Trigger: pipeline.TriggerOverBudget, Failed: true,
		Reason: pipeline.ReasonSummaryFailed, Retryable: true, Error: "summary model answered 503"}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the request acknowledged", 30*time.Second, func() bool { return e.pendingRequests() == 0 })
	if calls, _, _, answered := fp.Stats(); calls != 1 || answered != 1 {
		t.Fatalf("model calls %d (answered %d), want the one that outlasted the ack wait", calls, answered)
	}
	all := e.resultsFor("paused", 1, 5*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	var types []string
	for _, ev := range all {
		types = append(types, ev.Type)
	}
	if len(all) != 1 || all[0].Type != contract.TypeCompactionFailed {
		t.Fatalf("results stored for the request: %v, want only the failure published first", types)
	}
}
