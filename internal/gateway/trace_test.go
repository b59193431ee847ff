package gateway_test

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestCallsAreSpans: a call is a server span, and its upstream call a
// client span under it with the GenAI conventions' attributes.
func TestCallsAreSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	s := start(t, 0, 0, nil)
	if status, body, _ := post(t, s.url+"/v1/chat/completions", nil, chatBody(msg("user", "trace me "+nonce()))); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range spans {
		byName[sp.Name] = sp
	}
	server, ok := byName["gateway chat"]
	if !ok || server.SpanKind != trace.SpanKindServer {
		t.Fatalf("no server span gateway chat in %d spans", len(spans))
	}
	up, ok := byName["chat gpt-4o"]
	if !ok || up.SpanKind != trace.SpanKindClient || up.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Fatalf("no client span chat gpt-4o under the call's")
	}
	want := map[attribute.Key]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o"}
	for _, a := range up.Attributes {
		if v, ok := want[a.Key]; ok && a.Value.AsString() == v {
			delete(want, a.Key)
		}
	}
	if len(want) > 0 {
		t.Fatalf("the upstream span lacks %v", want)
	}
}
