package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/schemas"
)

// checkCompacted checks the session's context: pinned system prompt, then
// the summary, then the raw tail, with every invariant.
func (e *env) checkCompacted(sid string, limit int) []session.Message {
	e.t.Helper()
	ctx := context.Background()
	sess, err := e.store.Load(ctx, sid, false)
	if err != nil {
		e.t.Fatal(err)
	}
	view := pipeline.ContextOf(sess)
	if len(view) < 3 || view[0].Role != session.RoleSystem || !view[1].IsCompaction {
		e.t.Fatalf("context is not pinned + summary + tail: %d messages, first %s, second compaction=%v", len(view), view[0].Role, view[1].IsCompaction)
	}
	for _, m := range view[2:] {
		if m.IsCompaction || m.SummarisedBy != "" {
			e.t.Fatalf("tail message %d is not raw", m.Seq)
		}
	}
	all, _, err := e.store.History(ctx, sid)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := eval.CheckContext(all, view, e.counter.Context(view), limit, e.counter, pipeline.DefaultConfig().MaxSummaryTokens); err != nil {
		e.t.Fatal(err)
	}
	for _, m := range view {
		b, _ := json.Marshal(m)
		if err := schemas.Validate(schemas.Message, b); err != nil {
			e.t.Fatalf("stored message %d does not validate: %v", m.Seq, err)
		}
	}
	return view
}

func TestRequestProducesOneCompleted(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	r := e.start(nil, pipeline.DefaultConfig(), consumer.Options{Workers: 2})
	id := e.request("evt-1", contract.TypeContextOverBudget, "s1", false)

	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Type != contract.TypeCompactionCompleted {
		t.Fatalf("want one CompactionCompleted, got %+v", got)
	}
	ev := got[0]
	if ev.Data["request_id"] != id || ev.Data["outcome"] != "compacted" || ev.Subject != "compaction.completed.s1" || ev.ID != contract.RequestResultID(id) {
		t.Fatalf("result %s %s %v", ev.Subject, ev.ID, ev.Data)
	}
	view := e.checkCompacted("s1", 3000)
	if ev.Data["compaction_message_id"] != view[1].ID || ev.Data["tail_start_id"] != view[2].ID {
		t.Fatalf("result names compaction %v tail %v, context has %s %s", ev.Data["compaction_message_id"], ev.Data["tail_start_id"], view[1].ID, view[2].ID)
	}
	if n := e.pendingRequests(); n != 0 {
		t.Fatalf("%d requests left in %s after the ack", n, consumer.RequestStream)
	}
	r.stop()
	if st := r.cons.Stats(); st.Received != 1 || st.Completed != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDuplicatesAndReplicasLeaveOneCompaction(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	// Two replicas, each with its own connection and pipeline, both slowed
	// down so that they overlap.
	g1, g2 := newGate(extractive.New(e.counter)), newGate(extractive.New(e.counter))
	e.start(g1, pipeline.DefaultConfig(), consumer.Options{Workers: 1})
	e.start(g2, pipeline.DefaultConfig(), consumer.Options{Workers: 1})

	// The same event ten times: twice with its Nats-Msg-Id (the stream
	// keeps one), then without (a publisher that sets none). One replica
	// holds at most a few deliveries, so both get copies of one request.
	id := e.request("evt-dup", contract.TypeContextOverBudget, "s1", false)
	e.request(id, contract.TypeContextOverBudget, "s1", false)
	for range 8 {
		e.request(id, contract.TypeContextOverBudget, "s1", true)
	}
	// Let both replicas reach the model before either answers.
	e.waitFor("both replicas to call the model", 10*time.Second, func() bool { return g1.calls.Load() > 0 && g2.calls.Load() > 0 })
	g1.open()
	g2.open()
	e.waitFor("all requests answered", 20*time.Second, func() bool { return e.pendingRequests() == 0 })
	got := e.resultsFor("s1", 1, 5*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" {
		t.Fatalf("want one compacted result, got %d: %+v", len(got), got)
	}
	if n := e.compactions("s1"); n != 1 {
		t.Fatalf("%d compaction messages, want 1", n)
	}
	e.checkCompacted("s1", 3000)
}

func TestDistinctRequestsRacingCompactOnce(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{Workers: 4})
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{Workers: 4})
	for i := range 6 {
		e.request("evt-"+string(rune('a'+i)), contract.TypeContextOverflow, "s1", false)
	}
	got := e.resultsFor("s1", 6, 20*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	compacted := 0
	for _, ev := range got {
		if ev.Type != contract.TypeCompactionCompleted {
			t.Fatalf("failed: %v", ev.Data)
		}
		if ev.Data["outcome"] == "compacted" {
			compacted++
		}
	}
	if len(got) != 6 || compacted != 1 || e.compactions("s1") != 1 {
		t.Fatalf("%d results, %d compacted, %d compaction messages; want 6, 1, 1", len(got), compacted, e.compactions("s1"))
	}
}

func TestAppendDuringCompactionIsKept(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	g := newGate(extractive.New(e.counter))
	e.start(g, pipeline.DefaultConfig(), consumer.Options{})
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the compaction never reached the model")
	}
	late := session.Message{Role: session.RoleUser, Content: session.TextContent("One more thing: my frequent flyer number is FF-99812.")}
	e.counter.Ensure(&late)
	added, err := e.store.Append(context.Background(), "s1", late)
	if err != nil {
		t.Fatal(err)
	}
	g.open()
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" {
		t.Fatalf("results %+v", got)
	}
	view := e.checkCompacted("s1", 3000)
	if last := view[len(view)-1]; last.ID != added[0].ID || last.Text() != late.Text() {
		t.Fatalf("the message appended during the compaction is not the context's last: %+v", last)
	}
}

func TestKilledReplicaIsRedelivered(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	g := newGate(extractive.New(e.counter))
	a := e.start(g, pipeline.DefaultConfig(), consumer.Options{ShutdownGrace: 100 * time.Millisecond})
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the compaction never reached the model")
	}
	// Kill: the connection goes away mid-compaction, with no ack, nak or
	// result; the process's work is abandoned.
	a.nc.Close()
	a.stop()
	if got := filter(e.results(), "s1", contract.TypeCompactionCompleted, contract.TypeCompactionFailed); len(got) != 0 {
		t.Fatalf("the killed replica published %+v", got)
	}
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	got := e.resultsFor("s1", 1, 4*testAckWait+10*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" || e.compactions("s1") != 1 {
		t.Fatalf("after the restart: %d results %+v, %d compactions", len(got), got, e.compactions("s1"))
	}
	e.checkCompacted("s1", 3000)
}

func TestCommittedButUnpublishedAnswersCompacted(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	// A first replica commits the compaction, then dies before publishing
	// (simulated: the pipeline ran outside any consumer).
	svc, err := pipeline.New(e.store, e.breakers, extractive.New(e.counter), pipeline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	first, err := svc.Compact(context.Background(), pipeline.Request{ID: "evt-1", SessionID: "s1", Trigger: pipeline.TriggerOverBudget})
	if err != nil || first.Outcome != pipeline.OutcomeCompacted {
		t.Fatal(err, first)
	}
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" || got[0].Data["compaction_message_id"] != first.CompactionMessageID {
		t.Fatalf("redelivered request answered %+v, first run %+v", got, first)
	}
	if e.compactions("s1") != 1 {
		t.Fatal("a second compaction was written")
	}
}

func TestServerRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.Server(t, dir, -1)
	e := envOn(t, srv, consumer.Settings{AckWait: testAckWait})
	e.importSession("s1", 3000, chat(40))
	e.importSession("s2", 3000, chat(5))
	now := time.Now()
	for i := range 3 {
		if _, _, err := e.breakers.RecordFailure(context.Background(), "s2", session.Failure{RequestID: fmt.Sprint("req-", i), Error: "upstream 503", MaxFailures: 3}, now); err != nil {
			t.Fatal(err)
		}
	}
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	srv.Shutdown()
	srv.WaitForShutdown()

	e = envOn(t, natstest.Server(t, dir, -1), consumer.Settings{AckWait: testAckWait})
	rec, err := e.store.Record(context.Background(), "s1")
	if err != nil || rec.HeadSeq != 161 {
		t.Fatalf("session after restart: %+v %v", rec, err)
	}
	b, err := e.breakers.Breaker(context.Background(), "s2")
	if err != nil || !b.Open() || b.Failures != 3 {
		t.Fatalf("breaker after restart: %+v %v", b, err)
	}
	if n := e.pendingRequests(); n != 1 {
		t.Fatalf("%d pending requests after restart, want 1", n)
	}
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" {
		t.Fatalf("results %+v", got)
	}
	e.checkCompacted("s1", 3000)
}

func TestMalformedInputs(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	ce := func(typ, sid string) nats.Header {
		return nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"id-" + sid + typ}, "ce-source": {"urn:test"}, "ce-type": {typ}, "Content-Type": {"application/json"}}
	}
	cases := []struct {
		name, subject string
		header        nats.Header
		body          string
		reason        string // in the DLQ reason, or "" for a CompactionFailed
		failed        string // the CompactionFailed reason
	}{
		{"not JSON", contract.OverBudgetPrefix + "bad1", ce(contract.TypeContextOverBudget, "bad1"), "{not json", "data", ""},
		{"not a CloudEvent", contract.OverBudgetPrefix + "bad2", nil, `{"session_id":"bad2"}`, "not a CloudEvent", ""},
		{"wrong type", contract.OverBudgetPrefix + "bad3", ce("CompactionCompleted", "bad3"), `{"session_id":"bad3"}`, "type", ""},
		{"missing session_id", contract.OverBudgetPrefix + "bad4", ce(contract.TypeContextOverBudget, "bad4"), `{"model":"gpt-4o"}`, "session_id", ""},
		{"oversized", contract.OverBudgetPrefix + "bad5", ce(contract.TypeContextOverBudget, "bad5"), `{"session_id":"bad5","focus":"` + strings.Repeat("x", events.MaxRequestBytes) + `"}`, "over", ""},
		{"invalid UTF-8", contract.OverBudgetPrefix + "bad6", ce(contract.TypeContextOverBudget, "bad6"), "{\"session_id\":\"bad6\",\"model\":\"\xff\xfe\"}", "UTF-8", ""},
		{"subject and data disagree", contract.OverBudgetPrefix + "bad7", ce(contract.TypeContextOverBudget, "bad7"), `{"session_id":"other"}`, "differs", ""},
		{"type and subject disagree", contract.OverflowPrefix + "bad8", ce(contract.TypeContextOverBudget, "bad8"), `{"session_id":"bad8"}`, "subject", ""},
		{"unknown session", contract.OverBudgetPrefix + "nosuch", ce(contract.TypeContextOverBudget, "nosuch"), `{"session_id":"nosuch"}`, "", "session_not_found"},
	}
	for _, tc := range cases {
		m := &nats.Msg{Subject: tc.subject, Header: tc.header, Data: []byte(tc.body)}
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatalf("%s: publish: %v", tc.name, err)
		}
	}
	// The service keeps serving.
	e.request("evt-good", contract.TypeContextOverBudget, "s1", false)
	e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted)

	e.waitFor("every malformed request answered", 10*time.Second, func() bool { return e.pendingRequests() == 0 })
	dlq := map[string]string{}
	for _, m := range e.streamEvents(consumer.DLQStream) {
		dlq[m.Header.Get(consumer.HeaderSubject)] = m.Header.Get(consumer.HeaderReason)
		if m.Subject == "" || m.Header.Get(consumer.HeaderStreamSeq) == "" {
			t.Errorf("dead letter without its origin: %v", m.Header)
		}
	}
	for _, tc := range cases {
		if tc.reason == "" {
			got := filter(e.results(), "nosuch", contract.TypeCompactionFailed)
			if len(got) != 1 || got[0].Data["reason"] != tc.failed {
				t.Errorf("%s: want one CompactionFailed %s, got %+v", tc.name, tc.failed, got)
			}
			continue
		}
		reason, ok := dlq[tc.subject]
		if !ok {
			t.Errorf("%s: not in the DLQ", tc.name)
			continue
		}
		if !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: DLQ reason %q does not say %q", tc.name, reason, tc.reason)
		}
		// A request with an id and a session is answered too: the runtime
		// waiting for it learns why at once.
		_, sid, _ := contract.RequestSubject(tc.subject)
		got := filter(e.results(), sid, contract.TypeCompactionFailed)
		if tc.header == nil {
			if len(got) != 0 {
				t.Errorf("%s: a request without an id answered: %+v", tc.name, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Data["reason"] != "invalid_request" || got[0].Data["request_id"] != tc.header.Get("ce-id") ||
			!strings.Contains(got[0].Data["error"].(string), tc.reason) || got[0].ID != contract.FailedResultID(tc.header.Get("ce-id")) {
			t.Errorf("%s: want one CompactionFailed invalid_request saying %q, got %+v", tc.name, tc.reason, got)
		}
	}
	for _, m := range e.streamEvents(consumer.DLQStream) {
		if !strings.HasPrefix(m.Subject, "compactor.dlq.") {
			t.Errorf("dead letter on %s, want compactor.dlq.<session>", m.Subject)
		}
	}
}

func TestBreakerOpensOnceAndResets(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	cfg := pipeline.DefaultConfig()
	f := &failing{retryable: false}
	r := e.start(f, cfg, consumer.Options{})
	for i := range cfg.MaxFailures + 2 {
		e.request("evt-"+string(rune('a'+i)), contract.TypeContextOverBudget, "s1", false)
	}
	failed := e.resultsFor("s1", cfg.MaxFailures+2, 15*time.Second, contract.TypeCompactionFailed)
	opened := e.resultsFor("s1", 1, time.Second, contract.TypeCompactionCircuitOpened)
	if len(failed) != cfg.MaxFailures+2 || len(opened) != 1 {
		t.Fatalf("%d failed, %d circuit opened; want %d and 1", len(failed), len(opened), cfg.MaxFailures+2)
	}
	for i, ev := range failed {
		want := "summary_failed"
		if i >= cfg.MaxFailures {
			want = "circuit_open"
		}
		if ev.Data["reason"] != want {
			t.Fatalf("failure %d: reason %v, want %s", i, ev.Data["reason"], want)
		}
	}
	if n := f.calls.Load(); n != int64(cfg.MaxFailures) {
		t.Fatalf("the summariser was called %d times, want %d (none once the circuit is open)", n, cfg.MaxFailures)
	}
	r.stop()

	svc := sessions.New(e.store, e.breakers, nil)
	pub := &events.Publisher{JS: e.js}
	for range 2 { // a second reset is a no-op and publishes nothing
		if _, err := events.ResetBreaker(context.Background(), svc, pub, "s1"); err != nil {
			t.Fatal(err)
		}
	}
	closed := e.resultsFor("s1", 1, 5*time.Second, contract.TypeCompactionCircuitClosed)
	if len(closed) != 1 || closed[0].Data["by"] != "operator" {
		t.Fatalf("circuit closed events %+v", closed)
	}
	e.start(nil, cfg, consumer.Options{})
	e.request("evt-after", contract.TypeContextOverBudget, "s1", false)
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" {
		t.Fatalf("after the reset: %+v", got)
	}
}

// A store failing twice (a failover) is retried by redelivery: one result,
// two retries, no breaker count.
func TestTransientFailuresAreRetried(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	cfg := pipeline.DefaultConfig()
	r := e.startWith(nil, cfg, consumer.Options{}, flaky(2))
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Data["outcome"] != "compacted" {
		t.Fatalf("results %+v", got)
	}
	if st := r.cons.Stats(); st.Retried != 2 {
		t.Fatalf("stats %+v, want 2 retries", st)
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s1"); b.Failures != 0 {
		t.Fatalf("storage failures counted on the breaker: %+v", b)
	}
}

// A summary that fails after the provider's retries is answered at once
// (one CompactionFailed, summary_failed, retryable) and counts once on the
// breaker, also when the request is delivered again (a replica that died
// before acknowledging): issue 11's fifth defect, where three deliveries of
// one request opened the breaker and the runtime never got an answer.
func TestSummaryFailureIsAnsweredAndCountedOnce(t *testing.T) {
	e := newEnv(t)
	e.importSession("s1", 3000, chat(40))
	cfg := pipeline.DefaultConfig() // max_failures 3
	cfg.BreakerCooldown = 0         // each request's failure counts (not one per outage)
	f := &failing{retryable: true}
	r := e.start(f, cfg, consumer.Options{})
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Type != contract.TypeCompactionFailed || got[0].Data["reason"] != "summary_failed" ||
		got[0].Data["retryable"] != true || got[0].Data["failures"] != float64(1) {
		t.Fatalf("results %+v", got)
	}
	if st := r.cons.Stats(); st.Retried != 0 || st.Failed != 1 {
		t.Fatalf("stats %+v: a summary failure was redelivered", st)
	}
	// The same request again, as a redelivery after a crash would bring it:
	// it fails again and is not counted again.
	e.request("evt-1", contract.TypeContextOverBudget, "s1", true)
	e.request("evt-1", contract.TypeContextOverBudget, "s1", true)
	e.waitFor("the repeats", 10*time.Second, func() bool { return r.cons.Stats().Failed == 3 })
	b, _ := e.breakers.Breaker(context.Background(), "s1")
	if b.Failures != 1 || b.Open() {
		t.Fatalf("one request counted %d times (breaker %+v)", b.Failures, b)
	}
	if opened := e.resultsFor("s1", 0, 500*time.Millisecond, contract.TypeCompactionCircuitOpened); len(opened) != 0 {
		t.Fatalf("the breaker opened on one request: %+v", opened)
	}
	// Two more requests open it, once.
	e.request("evt-2", contract.TypeContextOverBudget, "s1", false)
	e.request("evt-3", contract.TypeContextOverBudget, "s1", false)
	if opened := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCircuitOpened); len(opened) != 1 {
		t.Fatalf("circuit opened events %+v", opened)
	}
}

// A store that stays unavailable: after max deliveries the request is
// answered (CompactionFailed, retryable) and dead-lettered.
func TestDeliveriesExhaustedEndInDLQ(t *testing.T) {
	e := envOn(t, natstest.Server(t, t.TempDir(), -1), consumer.Settings{AckWait: testAckWait, MaxDeliver: 3})
	e.importSession("s1", 3000, chat(40))
	e.startWith(nil, pipeline.DefaultConfig(), consumer.Options{}, flaky(-1))
	e.request("evt-1", contract.TypeContextOverBudget, "s1", false)
	got := e.resultsFor("s1", 1, 10*time.Second, contract.TypeCompactionCompleted, contract.TypeCompactionFailed)
	if len(got) != 1 || got[0].Type != contract.TypeCompactionFailed || got[0].Data["retryable"] != true ||
		got[0].Data["reason"] != "persist_failed" || !strings.Contains(got[0].Data["error"].(string), "3 deliveries") {
		t.Fatalf("results %+v", got)
	}
	e.waitFor("the dead letter", 5*time.Second, func() bool { return len(e.streamEvents(consumer.DLQStream)) == 1 })
	m := e.streamEvents(consumer.DLQStream)[0]
	if m.Subject != contract.DLQPrefix+"s1" || !strings.Contains(m.Header.Get(consumer.HeaderReason), "max deliveries") || m.Header.Get(consumer.HeaderRequestID) != "evt-1" {
		t.Fatalf("dead letter %s %v", m.Subject, m.Header)
	}
	if _, _, err := events.DecodeRequest(m.Header.Get(consumer.HeaderSubject), m.Header, m.Data); err != nil {
		t.Fatalf("the dead letter is not the original request: %v", err)
	}
	if e.pendingRequests() != 0 {
		t.Fatal("the request is still pending")
	}
}

func TestShutdownReleasesQueuedWork(t *testing.T) {
	e := newEnv(t)
	for _, sid := range []string{"s1", "s2", "s3"} {
		e.importSession(sid, 3000, chat(40))
	}
	g := newGate(extractive.New(e.counter))
	a := e.start(g, pipeline.DefaultConfig(), consumer.Options{Workers: 1, ShutdownGrace: 200 * time.Millisecond})
	for _, sid := range []string{"s1", "s2", "s3"} {
		e.request("evt-"+sid, contract.TypeContextOverBudget, sid, false)
	}
	<-g.entered
	a.stop() // one compaction running past the grace, two queued: all released
	if st := a.cons.Stats(); st.Released < 1 || st.Completed != 0 {
		t.Fatalf("stats after shutdown %+v", st)
	}
	start := time.Now()
	e.start(nil, pipeline.DefaultConfig(), consumer.Options{})
	for _, sid := range []string{"s1", "s2", "s3"} {
		got := e.resultsFor(sid, 1, 10*time.Second, contract.TypeCompactionCompleted)
		if len(got) != 1 {
			t.Fatalf("%s: %+v", sid, got)
		}
	}
	if time.Since(start) > testAckWait*2 {
		t.Logf("released work took %v to come back (AckWait %v)", time.Since(start), testAckWait)
	}
}
