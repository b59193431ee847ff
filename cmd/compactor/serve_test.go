package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/schemas"
)

// served is `compactor serve` running in-process.
type served struct {
	cancel context.CancelFunc
	done   chan int
	logs   *natstest.LogBuffer
}

// startServe runs serve with args against url and waits until its micro
// service answers a ping.
func startServe(t *testing.T, url string, args ...string) *served {
	t.Helper()
	return startServeAt(t, url, append([]string{"--nats-url", url}, args...)...)
}

// startServeAt runs serve with args and waits until its micro service
// answers a ping on url.
func startServeAt(t *testing.T, url string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, done: make(chan int, 1), logs: &natstest.LogBuffer{}}
	args = append([]string{"serve", "--metrics-addr", ""}, args...)
	go func() { s.done <- run(ctx, args, io.Discard, s.logs) }()
	var nc *nats.Conn
	natstest.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		var err error
		if nc, err = nats.Connect(url); err != nil {
			return fmt.Errorf("no server at %s: %w\n%s", url, err, s.logs.String())
		}
		return nil
	})
	defer nc.Close()
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		select {
		case code := <-s.done:
			t.Fatalf("serve exited %d before serving:\n%s", code, s.logs.String())
		default:
		}
		if _, err := nc.Request("$SRV.PING."+contract.ServiceName, nil, 200*time.Millisecond); err != nil {
			return fmt.Errorf("serve does not answer pings: %w\n%s", err, s.logs.String())
		}
		return nil
	})
	// A ping is answered once the service is added, its endpoints a
	// moment later: wait for a session endpoint too (any answer but none).
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := c.Context(ctx, "startup-probe"); errors.Is(err, client.ErrNoService) {
			return fmt.Errorf("serve's session endpoints do not answer: %w\n%s", err, s.logs.String())
		}
		return nil
	})
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels serve (as SIGINT does) and checks it exits 0.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case code := <-s.done:
		if code != 0 {
			t.Errorf("serve exited %d after shutdown:\n%s", code, s.logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("serve did not stop within 30s")
	}
}

// cli runs a command against url and decodes its JSON output into v.
func cli(t *testing.T, url string, v any, args ...string) int {
	t.Helper()
	code, out, stderr := runCLI(t, append(args, "--nats-url", url)...)
	if v != nil && out != "" {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v: output is not JSON: %v\n%s\nstderr: %s", args, err, out, stderr)
		}
	}
	if code != 0 {
		t.Logf("%v: exit %d, stderr: %s", args, code, stderr)
	}
	return code
}

// streamData returns the data and type of every message of a stream.
func streamData(t *testing.T, js jetstream.JetStream, stream string) (types []string, data []map[string]any) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var d map[string]any
		json.Unmarshal(m.Data, &d)
		types = append(types, m.Header.Get("ce-type"))
		data = append(data, d)
	}
	return types, data
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeWalkthrough is the README's walk-through against a running
// service: import the bundled trajectory, compact it by id over events,
// read the context and the history, use the micro endpoints, read
// /metrics, then shut down cleanly.
func TestServeWalkthrough(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	url := srv.ClientURL()
	metricsAddr := freeAddr(t)
	s := startServe(t, url, "--metrics-addr", metricsAddr)

	var imp sessions.Created
	if code := cli(t, url, &imp, "session", "import", fixture, "--session-id", "tau2", "--context-limit", "6000"); code != 0 {
		t.Fatal("import failed")
	}
	if imp.SessionID != "tau2" || imp.Messages != 62 || imp.Tokens < 9000 || imp.ContextLimit != 6000 {
		t.Fatalf("import: %+v", imp)
	}
	if code := cli(t, url, nil, "session", "import", fixture, "--session-id", "tau2"); code != 1 {
		t.Fatalf("importing a taken id: exit %d, want 1", code)
	}

	code, out, stderr := runCLI(t, "compact", "tau2", "--nats-url", url, "--timeout", "30s")
	if code != 0 {
		t.Fatalf("compact: exit %d: %s", code, stderr)
	}
	if err := schemas.Validate(schemas.CompactionCompleted, []byte(out)); err != nil {
		t.Fatalf("printed result does not validate: %v\n%s", err, out)
	}
	// Printed in the contract's order, not sorted.
	if i, j, k := strings.Index(out, `"session_id"`), strings.Index(out, `"request_id"`), strings.Index(out, `"outcome"`); i < 0 || i > j || j > k {
		t.Fatalf("compact printed its keys out of the contract's order:\n%s", out)
	}
	var res map[string]any
	json.Unmarshal([]byte(out), &res)
	if res["outcome"] != "compacted" || res["session_id"] != "tau2" || res["tokens_after"].(float64) > 6000 {
		t.Fatalf("result %v", res)
	}

	var view sessions.ContextView
	if cli(t, url, &view, "session", "context", "tau2") != 0 {
		t.Fatal("session context failed")
	}
	if len(view.Messages) < 3 || view.Messages[0].Role != "system" || !view.Messages[1].IsCompaction ||
		view.Tokens != int(res["tokens_after"].(float64)) || view.Messages[1].ID != res["compaction_message_id"] {
		t.Fatalf("context: %d messages, %d tokens, result %v", len(view.Messages), view.Tokens, res)
	}
	var hist sessions.History
	if cli(t, url, &hist, "session", "show", "tau2") != 0 {
		t.Fatal("session show failed")
	}
	marked := 0
	for _, m := range hist.Messages {
		if m.SummarisedBy == view.Messages[1].ID {
			marked++
		}
	}
	if len(hist.Messages) != 62 || len(hist.Compactions) != 1 || marked != int(res["messages_summarised"].(float64)) || hist.Record.CompactionID != view.Messages[1].ID {
		t.Fatalf("history: %d messages (%d marked), %d compactions, record %+v", len(hist.Messages), marked, len(hist.Compactions), hist.Record)
	}
	// Nothing new: a second request changes nothing.
	code, out, _ = runCLI(t, "compact", "tau2", "--nats-url", url)
	if code != 0 || !strings.Contains(out, `"outcome": "noop"`) && !strings.Contains(out, `"outcome": "already_compacted"`) {
		t.Fatalf("second compact: exit %d: %s", code, out)
	}
	var list []map[string]any
	if cli(t, url, &list, "breaker", "list") != 0 || len(list) != 0 {
		t.Fatalf("breakers: %v", list)
	}
	var page session.SessionPage
	if cli(t, url, &page, "session", "list", "--compacted", "true", "--limit", "10") != 0 || len(page.Sessions) != 1 ||
		page.Sessions[0].SessionID != "tau2" || page.Sessions[0].Messages != 62 || page.Sessions[0].Compactions != 1 || page.Next != "" {
		t.Fatalf("session list: %+v", page)
	}
	if cli(t, url, &page, "session", "list", "--idle-for", "1h") != 0 || len(page.Sessions) != 0 {
		t.Fatalf("session list of sessions idle for an hour: %+v", page)
	}
	if code, _, stderr := runCLI(t, "session", "list", "--limit", "5000", "--nats-url", url); code != 2 || !strings.Contains(stderr, "at most 1000") {
		t.Fatalf("a page over the maximum: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "session", "context", "nope", "--nats-url", url); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("unknown session: exit %d: %s", code, stderr)
	}

	// The micro service.
	nc, js := natstest.Connect(t, srv)
	var info struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Name, Subject string
		} `json:"endpoints"`
	}
	m, err := nc.Request("$SRV.INFO."+contract.ServiceName, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(m.Data, &info)
	subjects := map[string]bool{}
	for _, e := range info.Endpoints {
		subjects[e.Subject] = true
	}
	for _, want := range []string{contract.SubjectCompact, contract.SubjectBreaker, contract.SubjectReset, contract.SubjectCreate, contract.SubjectAppend, contract.SubjectContext} {
		if !subjects[want] {
			t.Errorf("micro info lacks endpoint %s: %s", want, m.Data)
		}
	}
	// nats micro stats: the service-wide counters once, under compact.
	m, err = nc.Request("$SRV.STATS."+contract.ServiceName, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Endpoints []struct {
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		} `json:"endpoints"`
	}
	json.Unmarshal(m.Data, &stats)
	withData := 0
	for _, e := range stats.Endpoints {
		// Every endpoint says its own answers by code; only compact
		// carries the service-wide counters.
		var data map[string]any
		_ = json.Unmarshal(e.Data, &data)
		if _, ok := data["answers"]; !ok {
			t.Errorf("endpoint %s does not say its answers: %s", e.Name, e.Data)
		}
		if _, ok := data["received"]; ok {
			withData++
			if e.Name != "compact" {
				t.Errorf("endpoint %s repeats the service's stats: %s", e.Name, e.Data)
			}
		}
	}
	if len(stats.Endpoints) < 10 || withData != 1 {
		t.Fatalf("stats: %d endpoints, %d with the service's data: %s", len(stats.Endpoints), withData, m.Data)
	}
	request := func(subject string, body any) *nats.Msg {
		t.Helper()
		b, _ := json.Marshal(body)
		m, err := nc.Request(subject, b, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		return m
	}
	chat := []map[string]any{{"role": "system", "content": "You are terse."}}
	for i := range 30 {
		chat = append(chat, map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: what is the fare code for flight HAT%03d on 2024-05-%02d?", i, i, 1+i%28)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Flight HAT%03d uses fare code Y%02d and costs $%d.", i, i, 100+i)})
	}
	m = request(contract.SubjectCreate, map[string]any{"session_id": "m1", "context_limit": 1200, "messages": chat[:41]})
	if m.Header.Get(micro.ErrorHeader) != "" || !strings.Contains(string(m.Data), `"messages":41`) {
		t.Fatalf("session.create: %v %s", m.Header, m.Data)
	}
	m = request(contract.SubjectAppend, map[string]any{"session_id": "m1", "messages": chat[41:]})
	var app sessions.Appended
	json.Unmarshal(m.Data, &app)
	if app.FirstSeq != 42 || app.LastSeq != 61 || len(app.IDs) != 20 || app.Bytes == 0 {
		t.Fatalf("session.append: %s", m.Data)
	}
	m = request(contract.SubjectAppend, map[string]any{"session_id": "m1", "messages": []map[string]any{{"role": "robot", "content": "x"}}})
	if m.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(m.Header.Get(micro.ErrorHeader), "robot") {
		t.Fatalf("a bad message: %v %s", m.Header, m.Data)
	}
	// Misspelt and mistyped fields are refused, named as the body names them.
	m = request(contract.SubjectCompact, map[string]any{"session_id": "m1", "context_limt": 800})
	if m.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(string(m.Data), `unknown field \"context_limt\"`) {
		t.Fatalf("a misspelt field: %v %s", m.Header, m.Data)
	}
	m = request(contract.SubjectAppend, map[string]any{"session_id": "m1", "messages": chat[:1], "expected_head_seq": "61"})
	if m.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(string(m.Data), "expected_head_seq: got string, want integer") || strings.Contains(string(m.Data), "Go struct") {
		t.Fatalf("a mistyped field: %v %s", m.Header, m.Data)
	}
	m = request(contract.SubjectCompact, map[string]any{"session_id": "m1", "request_id": "sync-1"})
	if err := schemas.Validate(schemas.CompactionCompleted, m.Data); err != nil || !strings.Contains(string(m.Data), `"outcome":"compacted"`) {
		t.Fatalf("compact: %v %s", err, m.Data)
	}
	m = request(contract.SubjectCompact, map[string]any{"session_id": "missing"})
	if m.Header.Get(micro.ErrorCodeHeader) != "404" || schemas.Validate(schemas.CompactionFailed, m.Data) != nil {
		t.Fatalf("compact of a missing session: %v %s", m.Header, m.Data)
	}
	m = request(contract.SubjectContext, map[string]any{"session_id": "m1"})
	json.Unmarshal(m.Data, &view)
	if view.Tokens > 1200 || !view.Messages[1].IsCompaction {
		t.Fatalf("context after the synchronous compaction: %d tokens", view.Tokens)
	}
	m = request(contract.SubjectBreaker, map[string]any{"session_id": "m1"})
	if !strings.Contains(string(m.Data), `"state":"closed"`) || strings.Contains(string(m.Data), "0001-01-01") {
		t.Fatalf("breaker.get: %s", m.Data)
	}
	// The synchronous compaction published its result event too, once.
	types, data := streamData(t, js, consumer.ResultStream)
	n := 0
	for i := range types {
		if data[i]["request_id"] == "sync-1" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d result events for the synchronous request, want 1", n)
	}

	// A malformed request is dead-lettered, and counted as a failure.
	if _, err := js.Publish(context.Background(), "agent.context.over_budget.m1", []byte("not a CloudEvent")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamMsgs(t, js, consumer.DLQStream); n != 1 {
			return fmt.Errorf("%d dead letters, want 1", n)
		}
		return nil
	})

	// Metrics say what happened (the dead letter is counted once its
	// copy is stored, a moment after the stream holds it).
	var body []byte
	natstest.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`compactor_requests_completed_total{outcome="compacted",trigger="over_budget"} 2`,
			`compactor_requests_failed_total{reason="session_not_found",retryable="false"} 1`, "compactor_deliveries_received_total 3", "compactor_summary_calls_total",
			`compactor_requests_failed_total{reason="invalid_request",retryable="false"} 1`, `compactor_deliveries_dead_lettered_total{reason="invalid_request"} 1`} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("/metrics lacks %q", want)
			}
		}
		return nil
	})
	if !strings.Contains(string(body), `compactor_build_info{goversion="go`) {
		t.Error("/metrics lacks compactor_build_info")
	}
	// Every model call is counted and timed, by provider, model and outcome.
	for _, re := range []string{`compactor_model_calls_total\{model="[^"]+",outcome="ok",provider="\w+",purpose="request"\} [1-9]`,
		`compactor_model_call_duration_seconds_count\{model="[^"]+",outcome="ok",provider="\w+",purpose="request"\} [1-9]`} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	for _, path := range []string{"/livez", "/healthz", "/readyz"} {
		if resp, err := http.Get("http://" + metricsAddr + path); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
	}
	s.stop(t)
	if !strings.Contains(s.logs.String(), "stopped") {
		t.Fatalf("no clean stop in the logs:\n%s", s.logs.String())
	}
}

// scriptedModel is an OpenAI-compatible server: each call is answered by
// the mode set now: "ok" (a summary in the template), "auth" (OpenAI's
// real 401 body) or "block" (hold the call until the client goes away).
type scriptedModel struct {
	mode    atomic.Value
	calls   atomic.Int64
	entered chan struct{}
	done    chan struct{}
}

func newScriptedModel(t *testing.T, mode string) (*scriptedModel, string) {
	m := &scriptedModel{entered: make(chan struct{}, 100), done: make(chan struct{})}
	m.mode.Store(mode)
	srv := httptest.NewServer(m)
	t.Cleanup(func() { close(m.done); srv.Close() })
	return m, srv.URL + "/v1"
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	m.calls.Add(1)
	m.entered <- struct{}{}
	w.Header().Set("Content-Type", "application/json")
	switch m.mode.Load().(string) {
	case "block":
		select {
		case <-r.Context().Done():
		case <-m.done:
		}
		return
	case "auth":
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
		return
	}
	text := "## Goal\n- downgrade the user's flights to economy\n## User instructions\n- (none)\n## Decisions\n- reservations updated\n## Facts and identifiers\n- user omar_davis_3817\n## Files and artifacts\n- (none)\n## Errors and fixes\n- (none)\n## Open tasks\n- (none)\n"
	out, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 1000, "completion_tokens": 60, "total_tokens": 1060}})
	w.Write(out)
}

// TestServeBreakerOverCLI: a provider that refuses every call (a bad key)
// opens the session's breaker after max_failures, with exactly one
// CompactionCircuitOpened; later requests fail with circuit_open without a
// model call; `breaker reset` closes it and publishes
// CompactionCircuitClosed once; then a compaction succeeds.
func TestServeBreakerOverCLI(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	url := srv.ClientURL()
	model, base := newScriptedModel(t, "auth")
	startServe(t, url, "--provider", "openai", "--base-url", base, "--summary-model", "gpt-4o-mini")
	if cli(t, url, nil, "session", "import", fixture, "--session-id", "b1", "--context-limit", "6000") != 0 {
		t.Fatal("import failed")
	}
	for i := 1; i <= 3; i++ {
		var res map[string]any
		if code := cli(t, url, &res, "compact", "b1"); code != 1 || res["reason"] != "summary_failed" || res["failures"].(float64) != float64(i) {
			t.Fatalf("request %d: exit %d, %v", i, code, res)
		}
	}
	calls := model.calls.Load()
	var res map[string]any
	if code := cli(t, url, &res, "compact", "b1"); code != 1 || res["reason"] != "circuit_open" || model.calls.Load() != calls {
		t.Fatalf("with the breaker open: exit %d, %v, %d model calls after %d", code, res, model.calls.Load(), calls)
	}
	var br map[string]any
	if cli(t, url, &br, "breaker", "show", "b1") != 0 || br["state"] != "open" || br["failures"].(float64) != 3 {
		t.Fatalf("breaker show: %v", br)
	}
	var list []map[string]any
	if cli(t, url, &list, "breaker", "list") != 0 || len(list) != 1 || list[0]["session_id"] != "b1" {
		t.Fatalf("breaker list: %v", list)
	}
	var bpage session.BreakerPage
	if cli(t, url, &bpage, "breaker", "list", "--limit", "1") != 0 || len(bpage.Breakers) != 1 || bpage.Breakers[0].SessionID != "b1" {
		t.Fatalf("breaker list --limit 1: %+v", bpage)
	}
	var reset api.ResetAnswer
	if cli(t, url, &reset, "breaker", "reset", "b1") != 0 || !reset.WasOpen || reset.Previous.Failures != 3 {
		t.Fatalf("reset: %+v", reset)
	}
	if cli(t, url, &reset, "breaker", "reset", "b1") != 0 || reset.WasOpen {
		t.Fatalf("second reset: %+v", reset)
	}
	model.mode.Store("ok")
	if code := cli(t, url, &res, "compact", "b1"); code != 0 || res["outcome"] != "compacted" {
		t.Fatalf("after the reset: exit %d, %v", code, res)
	}
	_, js := natstest.Connect(t, srv)
	// The CLI got the last result from its subject, which the stream may
	// store a moment later.
	var count map[string]int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		types, _ := streamData(t, js, consumer.ResultStream)
		count = map[string]int{}
		for _, typ := range types {
			count[typ]++
		}
		if count[contract.TypeCompactionCompleted] > 0 || time.Now().After(deadline) {
			break
		}
	}
	if count[contract.TypeCompactionCircuitOpened] != 1 || count[contract.TypeCompactionCircuitClosed] != 1 ||
		count[contract.TypeCompactionFailed] != 4 || count[contract.TypeCompactionCompleted] != 1 {
		t.Fatalf("events: %v", count)
	}
}

// kvSessions binds the sessions bucket of a test server.
func kvSessions(t *testing.T, srv *server.Server) *kvstore.Sessions {
	t.Helper()
	nc, js := natstest.Connect(t, srv)
	s, err := kvstore.NewSessions(context.Background(), nc, js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServeStopCancelsStuckSynchronousCompaction: a synchronous compaction
// stuck in its model call does not hold a shutdown past the grace: it is
// cancelled and answers a retryable failure, and serve exits 0.
func TestServeStopCancelsStuckSynchronousCompaction(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	url := srv.ClientURL()
	model, base := newScriptedModel(t, "block")
	s := startServe(t, url, "--provider", "openai", "--base-url", base, "--summary-model", "gpt-4o-mini", "--shutdown-grace", "1s")
	if cli(t, url, nil, "session", "import", fixture, "--session-id", "sync1", "--context-limit", "6000") != 0 {
		t.Fatal("import failed")
	}
	nc, _ := natstest.Connect(t, srv)
	reply := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(contract.SubjectCompact, []byte(`{"session_id":"sync1","request_id":"stuck-1"}`), 30*time.Second)
		if err != nil {
			t.Errorf("request: %v", err)
		}
		reply <- m
	}()
	select {
	case <-model.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the model was never called")
	}
	start := time.Now()
	s.stop(t)
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("shutdown took %v with a 1s grace", d)
	}
	m := <-reply
	if m == nil || m.Header.Get(micro.ErrorCodeHeader) != "503" || !strings.Contains(string(m.Data), `"retryable":true`) {
		t.Fatalf("reply %v", m)
	}
}
