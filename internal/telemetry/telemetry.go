// Package telemetry is what the service's packages use of OpenTelemetry:
// its API only (the tracer, W3C trace context carried between spans and
// the CloudEvents and NATS headers, failed spans, trace ids in logs). The
// SDK and the OTLP exporters are package otlp's, which only serve imports:
// a package that traces carries the API, not the SDK.
//
// Until otlp.Setup installs a provider, the global tracer provider is
// OpenTelemetry's no-op one, whose spans carry their parent's context
// onward, so a runtime's traceparent still reaches the result events
// unchanged. Message contents are never recorded on a span.
package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span the service makes.
const ScopeName = "github.com/compactor/compactor"

// Tracer is the service's tracer, from the global provider (otlp.Setup's, a
// test's, or the no-op one).
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// Extract returns ctx with the remote span context that traceparent and
// tracestate carry (ctx as it is when they carry none that is valid).
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// Inject returns the traceparent and tracestate of ctx's span ("" when
// it has none).
func Inject(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// Fail marks span failed with err (nothing when err is nil).
func Fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// LogHandler adds the trace_id and span_id of a record's context (when it
// has a span, exported or only carried from a runtime's traceparent) to
// every record it handles: the log lines of a request lead to its trace.
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h LogHandler) WithGroup(name string) slog.Handler {
	return LogHandler{h.Handler.WithGroup(name)}
}
