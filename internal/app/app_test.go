package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tokens"
)

// service starts the wired service against url with a model behaving as
// b, stopped at the test's end.
func service(t *testing.T, url string, b fakeprovider.Behaviour, mod func(*app.Config)) (*app.App, *fakeprovider.Server) {
	t.Helper()
	fp, err := fakeprovider.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fp.Close)
	counter, _ := tokens.ForEncoding("cl100k_base")
	sum, err := fp.Summarizer(extractive.New(counter))
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.DefaultConfig()
	cfg.SummaryModel, cfg.SummaryProvider = "gpt-4o-mini", "openai"
	c := app.Config{NATSURL: url, Provision: true, AckWait: 2 * time.Second, ShutdownGrace: 200 * time.Millisecond,
		Pipeline: cfg, Summarizer: sum, RetryDelay: func(uint64) time.Duration { return 50 * time.Millisecond }}
	if mod != nil {
		mod(&c)
	}
	a, err := app.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	return a, fp
}

// call makes a micro request and decodes its answer: the error code ("" on
// success) and the body.
func call(t *testing.T, nc *nats.Conn, subject string, req any, out any) string {
	t.Helper()
	b, _ := json.Marshal(req)
	m, err := nc.Request(subject, b, 60*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if out != nil && len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("%s answered %q: %v", subject, m.Data, err)
		}
	}
	return m.Header.Get("Nats-Service-Error-Code")
}

func chatJSON(turns int) []map[string]any {
	out := []map[string]any{{"role": "system", "content": "You are a support agent for an airline."}}
	for i := range turns {
		out = append(out, map[string]any{"id": fmt.Sprintf("u%d", i), "role": "user", "content": fmt.Sprintf("question %d: where is my bag tagged BAG-%04d?", i, i)},
			map[string]any{"id": fmt.Sprintf("a%d", i), "role": "assistant", "content": fmt.Sprintf("bag BAG-%04d is in Lisbon, it arrives on day %d", i, i%28+1)})
	}
	return out
}

// Issue 11, second defect, over the endpoints: a create and an append
// repeated (a runtime retrying after a timeout) are applied once; a stale
// expected head is refused with the head; errors say what happened.
func TestSessionWritesAreIdempotent(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), nil, nil)
	nc, _ := natstest.Connect(t, srv)
	create := map[string]any{"session_id": "s1", "context_limit": 3000, "messages": chatJSON(3)}
	var c1, c2 sessions.Created
	if code := call(t, nc, contract.SubjectCreate, create, &c1); code != "" || c1.HeadSeq != 7 {
		t.Fatalf("create: %s %+v", code, c1)
	}
	if code := call(t, nc, contract.SubjectCreate, create, &c2); code != "" || c2 != c1 {
		t.Fatalf("the same create again: %s %+v, want %+v", code, c2, c1)
	}
	other := map[string]any{"session_id": "s1", "messages": chatJSON(1)}
	var eb contract.ErrorBody
	if code := call(t, nc, contract.SubjectCreate, other, &eb); code != "409" || eb.Status != contract.StatusNotApplied {
		t.Fatalf("another create on the id: %s %+v", code, eb)
	}
	app1 := map[string]any{"session_id": "s1", "messages": []map[string]any{{"id": "u-x", "role": "user", "content": "and my other bag?"}}}
	var a1, a2 sessions.Appended
	if code := call(t, nc, contract.SubjectAppend, app1, &a1); code != "" || a1.Status != sessions.StatusApplied || a1.HeadSeq != 8 {
		t.Fatalf("append: %s %+v", code, a1)
	}
	if code := call(t, nc, contract.SubjectAppend, app1, &a2); code != "" || a2.Status != sessions.StatusAlreadyApplied || a2.HeadSeq != 8 || a2.Messages[0].Seq != 8 {
		t.Fatalf("the same append again: %s %+v", code, a2)
	}
	stale := map[string]any{"session_id": "s1", "expected_head_seq": 5, "messages": []map[string]any{{"id": "u-y", "role": "user", "content": "hello?"}}}
	eb = contract.ErrorBody{}
	if code := call(t, nc, contract.SubjectAppend, stale, &eb); code != "409" || eb.Status != contract.StatusNotApplied || eb.HeadSeq == nil || *eb.HeadSeq != 8 {
		t.Fatalf("append at a stale head: %s %+v", code, eb)
	}
	eb = contract.ErrorBody{}
	if code := call(t, nc, contract.SubjectAppend, map[string]any{"session_id": "nope", "messages": chatJSON(1)}, &eb); code != "404" || eb.Status != contract.StatusNotApplied {
		t.Fatalf("append to no session: %s %+v", code, eb)
	}
	var h sessions.History
	if code := call(t, nc, contract.SubjectHistory, map[string]any{"session_id": "s1"}, &h); code != "" || len(h.Messages) != 8 {
		t.Fatalf("history: %s, %d messages", code, len(h.Messages))
	}
	var d1, d2 sessions.Deleted
	if call(t, nc, contract.SubjectDelete, map[string]any{"session_id": "s1"}, &d1) != "" || call(t, nc, contract.SubjectDelete, map[string]any{"session_id": "s1"}, &d2) != "" || d1 != d2 || !d1.Deleted {
		t.Fatalf("delete twice: %+v %+v", d1, d2)
	}
	if code := call(t, nc, contract.SubjectContext, map[string]any{"session_id": "s1"}, nil); code != "404" {
		t.Fatalf("context after delete: %s", code)
	}
}

// Issue 11, sixth defect, the endpoint's half: a synchronous compaction cut
// short by the instance's shutdown publishes nothing (it used to publish a
// retryable CompactionFailed, which then stayed the request's only stored
// result); the caller's retry with the same request_id on another instance
// completes, and that is the one stored result.
func TestInterruptedSyncCompactionPublishesNothing(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	first, fp := service(t, srv.ClientURL(), func(string) fakeprovider.Action { return fakeprovider.Action{Hang: true} }, nil)
	nc, js := natstest.Connect(t, srv)
	if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": "s1", "context_limit": 1500, "messages": chatJSON(60)}, nil); code != "" {
		t.Fatalf("create: %s", code)
	}
	req, _ := json.Marshal(map[string]any{"session_id": "s1", "request_id": "sync-1"})
	reply := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(contract.SubjectCompact, req, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		reply <- m
	}()
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, _, hung, _ := fp.Stats(); hung == 0 {
			return errors.New("the model was not called")
		}
		return nil
	})
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if m := <-reply; m == nil || m.Header.Get("Nats-Service-Error-Code") != "503" {
		t.Fatalf("interrupted compaction answered %v", m)
	}
	if n := resultCount(t, js, "s1"); n != 0 {
		t.Fatalf("%d result events published for an interrupted compaction", n)
	}
	service(t, srv.ClientURL(), nil, nil)
	var res map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "s1", "request_id": "sync-1"}, &res); code != "" || res["outcome"] != "compacted" {
		t.Fatalf("the retry: %s %v", code, res)
	}
	msgs := streamResults(t, js, "s1")
	if len(msgs) != 1 || msgs[0].Header.Get("ce-type") != contract.TypeCompactionCompleted || msgs[0].Header.Get("ce-id") != contract.RequestResultID("sync-1") {
		t.Fatalf("stored results %v", msgs)
	}
}

// A synchronous compaction that failed (summary_failed, retryable) has
// that failure as its one result (issue 42: the stream kept a failure and
// then a completion for one request id). The same request_id again
// answers the failure, calls no model and publishes nothing more; a new
// request_id is a new request, and compacts.
func TestRepeatedSyncCompactionAnswersItsOneResult(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	var calls atomic.Int64
	_, _ = service(t, srv.ClientURL(), func(string) fakeprovider.Action {
		if calls.Add(1) <= 4 { // the provider's whole retry budget for the first attempt
			return fakeprovider.Action{Status: 500}
		}
		return fakeprovider.Action{}
	}, nil)
	nc, js := natstest.Connect(t, srv)
	if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": "s1", "context_limit": 1500, "messages": chatJSON(60)}, nil); code != "" {
		t.Fatalf("create: %s", code)
	}
	var failed map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "s1", "request_id": "sync-1"}, &failed); code != "503" ||
		failed["reason"] != "summary_failed" || failed["retryable"] != true {
		t.Fatalf("the first attempt: %s %v", code, failed)
	}
	before := calls.Load()
	var again map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "s1", "request_id": "sync-1"}, &again); code != "503" ||
		again["reason"] != "summary_failed" || again["error"] != failed["error"] {
		t.Fatalf("the same request again: %s %v, want its failure", code, again)
	}
	if calls.Load() != before {
		t.Fatalf("the repeat called the model %d times", calls.Load()-before)
	}
	msgs := streamResults(t, js, "s1")
	if len(msgs) != 1 || msgs[0].Header.Get("ce-type") != contract.TypeCompactionFailed || msgs[0].Header.Get("ce-id") != contract.FailedResultID("sync-1") {
		t.Fatalf("stored results: %d %v, want the failure alone", len(msgs), msgs)
	}
	var res map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "s1", "request_id": "sync-2"}, &res); code != "" || res["outcome"] != "compacted" {
		t.Fatalf("a new request: %s %v", code, res)
	}
	// A repeat of the completed one answers it, and publishes nothing more.
	var repeat map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "s1", "request_id": "sync-2"}, &repeat); code != "" ||
		repeat["outcome"] != "compacted" || repeat["compaction_message_id"] != res["compaction_message_id"] {
		t.Fatalf("the repeat: %s %v", code, repeat)
	}
	if n := len(streamResults(t, js, "s1")); n != 2 {
		t.Fatalf("%d stored results after a repeat, want 2", n)
	}
}

func streamResults(t *testing.T, js jetstream.JetStream, sid string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, consumer.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	info, _ := st.Info(ctx)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if strings.HasSuffix(m.Subject, "."+sid) && !strings.Contains(m.Subject, "circuit") {
			out = append(out, m)
		}
	}
	return out
}

func resultCount(t *testing.T, js jetstream.JetStream, sid string) int {
	return len(streamResults(t, js, sid))
}

// Issue 11, second defect on a cluster: a runtime appends through the
// endpoint, one message per request with its own id, while the leader of
// the sessions stream is killed. Every answer is applied or a 503 that
// says to retry (never a raw transport error); retrying with the same
// ids, the session ends with every message exactly once, in order.
func TestAppendsThroughLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster")
	}
	c := natstest.Cluster(t)
	// One shard: a third of the R3 assets to elect on a loaded machine
	// (with three, provisioning ran past the setup's two minutes under
	// make test's parallel packages); the failover is the same.
	service(t, c.URLs(), nil, func(cfg *app.Config) { cfg.Replicas, cfg.Shards = 3, 1 })
	f1Data := kvstore.DataStream(kvstore.ShardOf(kvstore.DefaultTenant, "f1", 1))
	leader := -1
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if leader = c.StreamLeader(f1Data); leader < 0 {
			return errors.New("no leader for " + f1Data)
		}
		return nil
	})
	nc, _ := natstest.ConnectURL(t, c.URL((leader+1)%3))
	if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": "f1", "messages": chatJSON(1)}, nil); code != "" {
		t.Fatalf("create: %s", code)
	}
	const n = 120
	var mu sync.Mutex
	codes := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			body, _ := json.Marshal(map[string]any{"session_id": "f1", "messages": []map[string]any{{"id": fmt.Sprintf("m%03d", i), "role": "user", "content": fmt.Sprintf("message %d", i)}}})
			for try := 0; ; try++ {
				m, err := nc.Request(contract.SubjectAppend, body, 10*time.Second)
				code := "timeout"
				if err == nil {
					code = m.Header.Get("Nats-Service-Error-Code")
					var eb contract.ErrorBody
					if code != "" && (json.Unmarshal(m.Data, &eb) != nil || eb.Status != contract.StatusRetry) {
						t.Errorf("message %d: answered %s %q, want applied or a retry", i, code, m.Data)
						return
					}
				} else if !errorsIsTimeout(err) && !errors.Is(err, nats.ErrNoResponders) {
					// (No responders: the service's connection moving to
					// another node, a second; a runtime sends again.)
					t.Errorf("message %d: %v", i, err)
					return
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
				if code == "" {
					break
				}
				if try > 20 {
					t.Errorf("message %d: still %s after %d tries", i, code, try)
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	c.Kill(leader)
	<-done
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	var h sessions.History
	if code := call(t, nc, contract.SubjectHistory, map[string]any{"session_id": "f1"}, &h); code != "" {
		t.Fatalf("history: %s", code)
	}
	var got []string
	for _, m := range h.Messages[3:] {
		got = append(got, m.ID)
	}
	if len(got) != n {
		t.Fatalf("%d messages appended, want %d (answers %v)", len(got), n, codes)
	}
	for i, id := range got {
		if id != fmt.Sprintf("m%03d", i) {
			t.Fatalf("message %d is %s (answers %v)", i, id, codes)
		}
	}
	t.Logf("answers through the failover: %v", codes)
}

func errorsIsTimeout(err error) bool {
	return err == nats.ErrTimeout || strings.Contains(err.Error(), "timeout")
}

// serve --session-ttl: the service deletes sessions nobody wrote to for the
// TTL, with their breakers, and keeps the others.
func TestIdleSessionsExpire(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), nil, func(c *app.Config) { c.SessionTTL, c.SweepEvery = 2*time.Second, 200*time.Millisecond })
	nc, _ := natstest.Connect(t, srv)
	for _, sid := range []string{"idle", "busy"} {
		if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": sid, "messages": chatJSON(1)}, nil); code != "" {
			t.Fatalf("create %s: %s", sid, code)
		}
	}
	// A breaker of the idle session goes with it.
	bnc, bjs := natstest.Connect(t, srv)
	breakers, err := kvstore.NewBreakers(context.Background(), bnc, bjs)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := breakers.RecordFailure(context.Background(), "idle", session.Failure{RequestID: "r1", Error: "summary_failed: x", MaxFailures: 3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	turn := 0
	natstest.Eventually(t, 10*time.Second, 300*time.Millisecond, func() error {
		turn++
		body := map[string]any{"session_id": "busy", "messages": []map[string]any{{"id": fmt.Sprint("t", turn), "role": "user", "content": "still here"}}}
		if code := call(t, nc, contract.SubjectAppend, body, nil); code != "" {
			t.Fatalf("busy was swept while in use: %s", code)
		}
		if call(t, nc, contract.SubjectContext, map[string]any{"session_id": "idle"}, nil) != "404" {
			return errors.New("an idle session was not swept")
		}
		return nil
	})
	natstest.Eventually(t, 2*time.Second, 50*time.Millisecond, func() error {
		b, err := breakers.Breaker(context.Background(), "idle")
		if err == nil && b.Failures != 0 {
			err = fmt.Errorf("the swept session's breaker: %+v", b)
		}
		return err
	})
}

// A tool result of 600 KB (over one stored value: it is kept in chunks)
// sent through the endpoints is stored, compacted, and read back; an answer
// that would not fit one NATS message (the whole context of a session
// holding 1.1 MB) says so at once, with the parts to read it in, instead
// of leaving the caller waiting.
func TestLargeMessagesThroughTheEndpoints(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), nil, nil)
	nc, _ := natstest.Connect(t, srv)
	logOf := func(n int) string {
		return strings.Repeat("2026-12-03T10:00:00Z worker-3 processed batch 42: ok\n", n/52)
	}
	toolCall := func(id string) map[string]any {
		return map[string]any{"id": "call-" + id, "role": "assistant", "tool_calls": []map[string]any{{"id": id, "type": "function",
			"function": map[string]any{"name": "read_log", "arguments": `{"path":"/var/log/nightly.log"}`}}}}
	}
	big := logOf(600_000)
	msgs := append(chatJSON(30), toolCall("c1"), map[string]any{"id": "log-1", "role": "tool", "tool_call_id": "c1", "content": big})
	if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": "big", "context_limit": 8000, "messages": msgs}, nil); code != "" {
		t.Fatalf("create: %s", code)
	}
	var eb contract.ErrorBody
	more := []map[string]any{toolCall("c2"), {"id": "log-2", "role": "tool", "tool_call_id": "c2", "content": logOf(500_000)}}
	if code := call(t, nc, contract.SubjectAppend, map[string]any{"session_id": "big", "messages": more}, &eb); code != "" {
		t.Fatalf("append: %s %+v", code, eb)
	}
	eb = contract.ErrorBody{}
	if code := call(t, nc, contract.SubjectContext, map[string]any{"session_id": "big"}, &eb); code != "413" || eb.Parts != 2 || !strings.Contains(eb.Error, "in 2 parts") {
		t.Fatalf("a 1.1 MB context: %s %+v", code, eb)
	}
	var res map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "big", "trigger": "overflow"}, &res); code != "" || res["outcome"] != "compacted" {
		t.Fatalf("compact: %s %v", code, res)
	}
	var m struct {
		ID      string `json:"id"`
		Content string `json:"content"`
	}
	if code := call(t, nc, contract.SubjectMessage, map[string]any{"session_id": "big", "seq": 63}, &m); code != "" || m.ID != "log-1" || m.Content != big {
		t.Fatalf("the stored log: %s, %s, %d bytes", code, m.ID, len(m.Content))
	}
}

// A runtime's message over max_payload (a 1.2 MB log, a request carries at
// most 1 MB) reaches the service in parts (session.upload: out of order,
// one part twice), is appended by its upload id beside its tool call,
// compacts, and is read back in parts (session.message with part); the
// parts are gone once appended, and an upload with a part missing is
// refused.
func TestUploadsForMessagesOverMaxPayload(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), nil, nil)
	nc, js := natstest.Connect(t, srv)
	if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": "up", "context_limit": 8000, "messages": chatJSON(30)}, nil); code != "" {
		t.Fatalf("create: %s", code)
	}
	big := strings.Repeat("2026-12-03T10:00:00Z worker-3 processed batch 42: ok\n", 1_200_000/52)
	msg, _ := json.Marshal(map[string]any{"id": "log-1", "role": "tool", "tool_call_id": "c1", "content": big})
	var parts [][]byte
	for rest := msg; len(rest) > 0; {
		n := min(len(rest), contract.MaxUploadPartBytes)
		parts = append(parts, rest[:n])
		rest = rest[n:]
	}
	for _, i := range []int{2, 0, 1, 0} {
		var up sessions.Uploaded
		if code := call(t, nc, contract.SubjectUpload, map[string]any{"session_id": "up", "upload_id": "u-log", "part": i, "parts": len(parts), "data": parts[i]}, &up); code != "" || up.Bytes != len(parts[i]) {
			t.Fatalf("upload part %d: %s %+v", i, code, up)
		}
	}
	appendBody := map[string]any{"session_id": "up", "messages": []any{
		map[string]any{"id": "call-a", "role": "assistant", "tool_calls": []map[string]any{{"id": "c1", "type": "function", "function": map[string]any{"name": "read_log", "arguments": `{}`}}}},
		map[string]any{"upload_id": "u-log"}}}
	var ap sessions.Appended
	if code := call(t, nc, contract.SubjectAppend, appendBody, &ap); code != "" || ap.Status != sessions.StatusApplied || len(ap.Messages) != 2 || ap.Messages[1].ID != "log-1" {
		t.Fatalf("append: %s %+v", code, ap)
	}
	st, err := js.Stream(context.Background(), kvstore.DataStream(0))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background(), jetstream.WithSubjectFilter("sessions.*.*.up.u.>")); err != nil || len(info.State.Subjects) != 0 {
		t.Fatalf("an upload outlived its append: %v %v", info.State.Subjects, err)
	}
	var res map[string]any
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "up", "trigger": "overflow"}, &res); code != "" || res["outcome"] != "compacted" {
		t.Fatalf("compact: %s %v", code, res)
	}
	seq := ap.Messages[1].Seq
	var joined []byte
	for part, total := 0, 1; part < total; part++ {
		var mp contract.MessagePart
		if code := call(t, nc, contract.SubjectMessage, map[string]any{"session_id": "up", "seq": seq, "part": part}, &mp); code != "" {
			t.Fatalf("message part %d: %s", part, code)
		}
		total = mp.Parts
		joined = append(joined, mp.Data...)
	}
	var back struct {
		ID      string `json:"id"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(joined, &back); err != nil || back.ID != "log-1" || back.Content != big {
		t.Fatalf("the log read back in parts: %v, %d bytes", err, len(back.Content))
	}
	if code := call(t, nc, contract.SubjectUpload, map[string]any{"session_id": "up", "upload_id": "u-2", "part": 1, "parts": 2, "data": []byte(`"x"}`)}, nil); code != "" {
		t.Fatalf("upload: %s", code)
	}
	var eb contract.ErrorBody
	if code := call(t, nc, contract.SubjectAppend, map[string]any{"session_id": "up", "messages": []any{map[string]any{"upload_id": "u-2"}}}, &eb); code != "400" || !strings.Contains(eb.Error, "part 0") {
		t.Fatalf("an incomplete upload: %s %+v", code, eb)
	}
}

// /readyz says whether the service takes requests; /healthz whether the
// process is alive and connected; /livez whether it runs. With the NATS
// server gone, only /livez is 200; once it is back, all are.
func TestReadiness(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.Server(t, dir, -1)
	port := srv.Addr().(*net.TCPAddr).Port
	a, _ := service(t, srv.ClientURL(), nil, func(c *app.Config) { c.MetricsAddr = "127.0.0.1:0" })
	status := func(path string) int {
		resp, err := http.Get("http://" + a.MetricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		natstest.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
			if !cond() {
				return fmt.Errorf("%s: healthz %d, readyz %d", what, status("/healthz"), status("/readyz"))
			}
			return nil
		})
	}
	wait("started", func() bool { return status("/readyz") == 200 && status("/healthz") == 200 && status("/livez") == 200 })
	srv.Shutdown()
	srv.WaitForShutdown()
	wait("server gone", func() bool { return status("/readyz") == 503 && status("/healthz") == 503 })
	// The process runs: a liveness probe must not restart it for NATS.
	if got := status("/livez"); got != 200 {
		t.Fatalf("/livez %d with NATS gone, want 200", got)
	}
	natstest.Server(t, dir, port)
	wait("server back", func() bool { return status("/readyz") == 200 && status("/healthz") == 200 })
}

// serve --pprof-addr serves net/http/pprof on its own address, and only
// when asked: the metrics address never has the profiles.
func TestPprofOnlyWhenAsked(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	get := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	off, _ := service(t, srv.ClientURL(), nil, func(c *app.Config) { c.MetricsAddr = "127.0.0.1:0" })
	if off.PprofAddr != "" || get("http://"+off.MetricsAddr+"/debug/pprof/") != 404 {
		t.Fatalf("pprof served without --pprof-addr (at %q, or on the metrics address)", off.PprofAddr)
	}
	on, _ := service(t, srv.ClientURL(), nil, func(c *app.Config) { c.MetricsAddr, c.PprofAddr = "127.0.0.1:0", "127.0.0.1:0" })
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap"} {
		if code := get("http://" + on.PprofAddr + path); code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
	}
	if get("http://"+on.MetricsAddr+"/debug/pprof/") != 404 {
		t.Fatal("the metrics address serves the profiles")
	}
}
