package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
)

func attrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// One compaction through the service exports one connected trace: the
// runtime's span (the request's traceparent) -> the CONSUMER span of its
// delivery -> compact_context -> its steps -> the CLIENT span of the model
// call, and the PRODUCER span of the result event, whose traceparent is
// that span's. Through the compact endpoint the SERVER span takes the
// consumer's place. No span holds a message's text; every log line of the
// request names its trace.
func TestOneCompactionOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	srv := natstest.Server(t, t.TempDir(), -1)
	fp, err := fakeprovider.Start(fakeprovider.Rates(0, 0, 0, 0))
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
	logs := &natstest.LogBuffer{}
	a, err := app.Start(context.Background(), app.Config{NATSURL: srv.ClientURL(), Provision: true, Pipeline: cfg, Summarizer: sum,
		PrepareWorkers: 1, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.New(nc, client.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	secret := "the passenger's passport number is ZX81Q-SECRET"
	var msgs []client.Message
	for i := range 40 {
		msgs = append(msgs, client.Text(fmt.Sprintf("u%d", i), client.User, fmt.Sprintf("question %d: where is my bag BAG-%04d? %s", i, i, secret)),
			client.Text(fmt.Sprintf("a%d", i), client.Assistant, fmt.Sprintf("bag BAG-%04d is in Lisbon; it arrives on day %d", i, i%28+1)))
	}
	for _, sid := range []string{"by-event", "by-endpoint"} {
		if _, err := cl.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: 1500, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}

	const runtimeTrace, runtimeSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	parent := "00-" + runtimeTrace + "-" + runtimeSpan + "-01"
	res, err := cl.Compact(ctx, "by-event", client.CompactRequest{RequestID: "traced-1", TraceParent: parent})
	if err != nil || res.LLMCalls == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	// The consumer's span ends after the result is published and the
	// delivery acknowledged: wait for it.
	var spans tracetest.SpanStubs
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		spans = exp.GetSpans()
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindConsumer && s.SpanContext.TraceID().String() == runtimeTrace {
				return nil
			}
		}
		return fmt.Errorf("no consumer span yet (%d spans)", len(spans))
	})
	inTrace := map[trace.SpanID]tracetest.SpanStub{}
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != runtimeTrace {
			continue
		}
		inTrace[s.SpanContext.SpanID()] = s
		byName[s.Name] = append(byName[s.Name], s)
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), "SECRET") {
				t.Fatalf("span %s records a message's text in %s", s.Name, kv.Key)
			}
		}
	}
	one := func(name string) tracetest.SpanStub {
		t.Helper()
		if len(byName[name]) != 1 {
			names := []string{}
			for n := range byName {
				names = append(names, n)
			}
			t.Fatalf("%d spans named %q in the trace, want 1 (spans: %v)", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	childOf := func(s, p tracetest.SpanStub) {
		t.Helper()
		if s.Parent.SpanID() != p.SpanContext.SpanID() {
			t.Fatalf("span %s's parent is %s, want %s", s.Name, s.Parent.SpanID(), p.Name)
		}
	}
	cons := one("process agent.context.over_budget.{session_id}")
	if cons.SpanKind != trace.SpanKindConsumer || cons.Parent.SpanID().String() != runtimeSpan || !cons.Parent.IsRemote() {
		t.Fatalf("consumer span: kind %v, parent %s (remote %v)", cons.SpanKind, cons.Parent.SpanID(), cons.Parent.IsRemote())
	}
	ca := attrs(cons.Snapshot())
	for k, want := range map[string]string{"messaging.system": "nats", "messaging.operation.type": "process",
		"messaging.destination.name": "agent.context.over_budget.{session_id}", "messaging.consumer.group.name": "compactor",
		"cloudevents.event_id": "traced-1", "cloudevents.event_type": "ContextOverBudget"} {
		if got := ca[k].AsString(); got != want {
			t.Errorf("consumer span %s = %q, want %q", k, got, want)
		}
	}
	if ca["cloudevents.event_source"].AsString() == "" {
		t.Error("consumer span has no cloudevents.event_source")
	}
	cc := one("compact_context")
	childOf(cc, cons)
	cca := attrs(cc.Snapshot())
	if cca["gen_ai.operation.name"].AsString() != "compact_context" || cca["gen_ai.conversation.id"].AsString() != "by-event" ||
		cca["gen_ai.request.model"].AsString() != "gpt-4o" || cca["compactor.trigger"].AsString() != "over_budget" ||
		cca["compactor.outcome"].AsString() != "compacted" || cca["compactor.tokens_before"].AsInt64() != int64(res.TokensBefore) ||
		cca["compactor.tokens_after"].AsInt64() != int64(res.TokensAfter) || cca["compactor.summary_tokens"].AsInt64() == 0 ||
		cca["compactor.attempts"].AsInt64() != 1 {
		t.Errorf("compact_context attributes %v", cca)
	}
	for _, name := range []string{"load", "summarise", "verify", "commit"} {
		childOf(one(name), cc)
	}
	chat := one("chat gpt-4o-mini")
	childOf(chat, one("summarise"))
	cha := attrs(chat.Snapshot())
	if chat.SpanKind != trace.SpanKindClient || cha["gen_ai.provider.name"].AsString() != "openai" || cha["gen_ai.operation.name"].AsString() != "chat" ||
		cha["gen_ai.usage.input_tokens"].AsInt64() == 0 || cha["gen_ai.usage.output_tokens"].AsInt64() == 0 {
		t.Errorf("chat span: kind %v, attributes %v", chat.SpanKind, cha)
	}
	prod := one("send compaction.completed.{session_id}")
	childOf(prod, cons)
	if prod.SpanKind != trace.SpanKindProducer {
		t.Errorf("producer span kind %v", prod.SpanKind)
	}
	// The result event carries the producer span's context onward.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, "COMPACTION_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, contract.CompletedPrefix+"by-event")
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + runtimeTrace + "-" + prod.SpanContext.SpanID().String() + "-01"
	if got := m.Header.Get("ce-traceparent"); got != want {
		t.Fatalf("result event traceparent %q, want the producer span's %q", got, want)
	}
	// Every log line of the request names its trace.
	var found bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, `"request_id":"traced-1"`) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["trace_id"] != runtimeTrace || rec["span_id"] == "" {
			t.Fatalf("log line without the request's trace: %s", line)
		}
		found = true
	}
	if !found {
		t.Fatalf("no log line of the request:\n%s", logs.String())
	}

	// Through the endpoint: a SERVER span, the caller's child, over the
	// same tree.
	exp.Reset()
	const endpointTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	sres, err := cl.CompactSync(ctx, "by-endpoint", client.CompactRequest{RequestID: "traced-2", TraceParent: "00-" + endpointTrace + "-" + runtimeSpan + "-01"})
	if err != nil {
		t.Fatalf("compact by endpoint: %+v %v", sres, err)
	}
	var server, cc2 *tracetest.SpanStub
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		server, cc2 = nil, nil
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() != endpointTrace {
				continue
			}
			switch s.Name {
			case "compactor.compact":
				server = &s
			case "compact_context":
				cc2 = &s
			}
		}
		if server == nil || cc2 == nil {
			return fmt.Errorf("server span %v, compact_context %v", server != nil, cc2 != nil)
		}
		return nil
	})
	if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID().String() != runtimeSpan || cc2.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Fatalf("server span %+v; compact_context's parent %s", server, cc2.Parent.SpanID())
	}
}

// Issue 42: the SERVER spans of compactor.session.* ended before their work
// ran (0.0-0.5 ms) and never failed; the endpoints had no metrics. A
// session endpoint's span lasts until its answer (it carries the answer's
// size, set as it is sent: an ended span takes no attribute), an error
// answer fails it with its code, and the answers are counted by endpoint
// and code, in Prometheus and in the micro stats.
func TestEndpointSpansLastUntilTheirAnswer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	srv := natstest.Server(t, t.TempDir(), -1)
	counter, _ := tokens.ForEncoding("cl100k_base")
	a, err := app.Start(context.Background(), app.Config{NATSURL: srv.ClientURL(), Provision: true, Pipeline: pipeline.DefaultConfig(),
		Summarizer: extractive.New(counter)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ask := func(subject, body string) string {
		m, err := nc.Request(subject, []byte(body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m.Header.Get("Nats-Service-Error-Code")
	}
	if code := ask("compactor.session.create", `{"session_id":"s1","messages":[{"role":"user","content":"hello"}]}`); code != "" {
		t.Fatalf("create: %s", code)
	}
	if code := ask("compactor.session.context", `{"session_id":"nope"}`); code != "404" {
		t.Fatalf("context of a missing session: %s", code)
	}
	if code := ask("compactor.session.append", `{"session_id":"s1","messages":[{"role":"user","content":"hi","colour":"red"}]}`); code != "400" {
		t.Fatalf("append with an unknown field: %s", code)
	}
	want := map[string]string{"compactor.session.create": "", "compactor.session.context": "404", "compactor.session.append": "400"}
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		got := map[string]bool{}
		for _, s := range exp.GetSpans() {
			code, ok := want[s.Name]
			if !ok || s.SpanKind != trace.SpanKindServer {
				continue
			}
			var sized bool
			var errType string
			for _, kv := range s.Attributes {
				sized = sized || kv.Key == "rpc.nats.answer_bytes"
				if kv.Key == "error.type" {
					errType = kv.Value.AsString()
				}
			}
			if !sized {
				return fmt.Errorf("span %s ended before its answer was sent", s.Name)
			}
			if errType != code || (code != "") != (s.Status.Code.String() == "Error") {
				return fmt.Errorf("span %s: error.type %q, status %v; want %q", s.Name, errType, s.Status, code)
			}
			got[s.Name] = true
		}
		if len(got) != len(want) {
			return fmt.Errorf("spans %v of %v", got, want)
		}
		return nil
	})
	// Counted once the answer is sent: the reply may come first.
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		rec := httptest.NewRecorder()
		a.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, line := range []string{`compactor_endpoint_requests_total{code="404",endpoint="session_context"} 1`,
			`compactor_endpoint_requests_total{code="400",endpoint="session_append"} 1`, `compactor_endpoint_requests_total{code="ok",endpoint="session_create"} 1`} {
			if !strings.Contains(rec.Body.String(), line) {
				return fmt.Errorf("metrics lack %s", line)
			}
		}
		return nil
	})
	m, err := nc.Request("$SRV.STATS.compactor", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				Errors int64            `json:"errors"`
				ByCode map[string]int64 `json:"errors_by_code"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	for _, e := range stats.Endpoints {
		if e.Name == "session_context" && (e.Data.Errors != 1 || e.Data.ByCode["404"] != 1) {
			t.Fatalf("micro stats of session_context: %+v, want its 404", e.Data)
		}
	}
}

// Issue 42: a preparation's model call was a parentless span naming no
// session. It is the child of the preparation's own span, which names the
// session.
func TestPreparationSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	srv := natstest.Server(t, t.TempDir(), -1)
	fp, err := fakeprovider.Start(fakeprovider.Rates(0, 0, 0, 0))
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
	a, err := app.Start(context.Background(), app.Config{NATSURL: srv.ClientURL(), Provision: true, Pipeline: cfg, Summarizer: sum, PrepareWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var msgs []client.Message
	for i := range 70 {
		msgs = append(msgs, client.Text(fmt.Sprintf("u%d", i), client.User, fmt.Sprintf("question %d: where is my bag tagged BAG-%04d? It held my laptop and the charger for it.", i, i)),
			client.Text(fmt.Sprintf("a%d", i), client.Assistant, fmt.Sprintf("Bag BAG-%04d is in Lisbon; it arrives on day %d by the evening flight, and a courier brings it to you.", i, i%28+1)))
	}
	if _, err := cl.Create(ctx, "prep", client.NewSession{Model: "gpt-4o", ContextLimit: 6000, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	if err := cl.NearBudget(ctx, "prep", client.CompactRequest{RequestID: "hint-1"}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		var prep *tracetest.SpanStub
		spans := exp.GetSpans()
		for i, s := range spans {
			if s.Name == "prepare_context" {
				for _, kv := range s.Attributes {
					if kv.Key == "gen_ai.conversation.id" && kv.Value.AsString() == "prep" {
						prep = &spans[i]
					}
				}
			}
		}
		if prep == nil {
			return fmt.Errorf("no prepare_context span naming the session (%d spans)", len(spans))
		}
		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, s := range spans {
			byID[s.SpanContext.SpanID()] = s
		}
		for _, s := range spans {
			if s.SpanKind != trace.SpanKindClient {
				continue
			}
			for p, ok := s.Parent.SpanID(), true; ok && p.IsValid(); {
				if p == prep.SpanContext.SpanID() {
					return nil
				}
				var up tracetest.SpanStub
				up, ok = byID[p]
				p = up.Parent.SpanID()
			}
		}
		return fmt.Errorf("no model call under the preparation's span %v", prep.Attributes)
	})
}
