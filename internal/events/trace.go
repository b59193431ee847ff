package events

import (
	"context"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/telemetry"
)

// Trace is a request's distributed-tracing context: the CloudEvents
// distributed-tracing extension (traceparent and tracestate, W3C Trace
// Context). The events that answer a request carry it, so a trace spans
// the runtime's request and the service's result.
type Trace struct {
	Parent string
	State  string
}

// TraceOf returns an event's trace extensions.
func TraceOf(ev cloudevents.Event) Trace {
	var t Trace
	if v, ok := ev.Extensions()["traceparent"].(string); ok {
		t.Parent = v
	}
	if v, ok := ev.Extensions()["tracestate"].(string); ok {
		t.State = v
	}
	return t
}

// TraceFromHeader reads a trace from a message's headers: W3C's traceparent
// and tracestate, or their ce- forms.
func TraceFromHeader(h map[string][]string) Trace {
	var t Trace
	for _, name := range []string{"traceparent", contract.HeaderPrefix + "traceparent"} {
		if v, ok := contract.Header(h, name); ok {
			if d, err := contract.DecodeHeaderValue(v); err == nil {
				t.Parent = d
			}
		}
	}
	for _, name := range []string{"tracestate", contract.HeaderPrefix + "tracestate"} {
		if v, ok := contract.Header(h, name); ok {
			if d, err := contract.DecodeHeaderValue(v); err == nil {
				t.State = d
			}
		}
	}
	return t
}

// WithTrace returns ctx carrying t as its remote span context: the spans
// started under it are its children, and the events published under it
// carry the trace onward (the producer span's context, or t itself when
// no traces are exported).
func WithTrace(ctx context.Context, t Trace) context.Context {
	return telemetry.Extract(ctx, t.Parent, t.State)
}

// traceFrom is the trace context of ctx's span.
func traceFrom(ctx context.Context) Trace {
	p, st := telemetry.Inject(ctx)
	return Trace{Parent: p, State: st}
}

// apply sets t's extensions on ev; a value the SDK refuses is left out.
func (t Trace) apply(ev *cloudevents.Event) {
	if t.Parent != "" {
		_ = ev.Context.SetExtension("traceparent", t.Parent)
		if t.State != "" {
			_ = ev.Context.SetExtension("tracestate", t.State)
		}
	}
}
