package api

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/telemetry"
)

// tracedRequest is an endpoint request with its SERVER span (a child of
// the caller's trace: the request's traceparent header, named by the
// endpoint's subject) and its measure: both end with its answer, sent by
// the handler or, for work that goes on after it returns, by replyTo. An
// error answer marks the span failed with the code (issue 42: the spans of
// compactor.session.* ended before their work ran, and never failed).
type tracedRequest struct {
	micro.Request
	s        *Server
	endpoint string
	start    time.Time
	ctx      context.Context
	span     oteltrace.Span
	kept     bool   // the answer comes after the handler returns
	code     string // the handler's error answer's code
	once     sync.Once
}

func (t *tracedRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	t.code = code
	t.mark(code, description)
	return t.Request.Error(code, description, data, opts...)
}

// mark marks the span failed for an error answer.
func (t *tracedRequest) mark(code, description string) {
	if code == "" {
		return
	}
	t.span.SetAttributes(attribute.String("error.type", code))
	t.span.SetStatus(codes.Error, description)
}

// finish ends the span and counts the answer (once).
func (t *tracedRequest) finish(code string) {
	t.once.Do(func() {
		t.span.End()
		t.s.counts.add(t.endpoint, code)
		if o := t.s.d.ObserveEndpoint; o != nil {
			o(strings.TrimPrefix(t.endpoint, "tenant_"), code, time.Since(t.start))
		}
	})
}

// traced runs h under a SERVER span per request, measured.
func (s *Server) traced(endpoint, subject string, h micro.HandlerFunc) micro.HandlerFunc {
	return func(r micro.Request) {
		ctx := events.WithTrace(context.Background(), events.TraceFromHeader(r.Headers()))
		ctx, span := telemetry.Tracer().Start(ctx, subject, oteltrace.WithSpanKind(oteltrace.SpanKindServer),
			oteltrace.WithAttributes(attribute.String("rpc.system", "nats_micro"), attribute.String("rpc.service", "compactor"),
				attribute.String("rpc.method", subject)))
		t := &tracedRequest{Request: r, s: s, endpoint: endpoint, start: time.Now(), ctx: ctx, span: span}
		h(t)
		if !t.kept {
			t.finish(t.code)
		}
	}
}

// keepSpan hands r's SERVER span to the caller: the request is answered
// after its handler returns, by replyTo, which ends the span; ctx carries
// it. An untraced request (a test's) gets the caller's trace from its
// headers.
func keepSpan(r micro.Request) (ctx context.Context, span oteltrace.Span) {
	if t, ok := r.(*tracedRequest); ok {
		t.kept = true
		return t.ctx, t.span
	}
	ctx = events.WithTrace(context.Background(), events.TraceFromHeader(r.Headers()))
	return ctx, oteltrace.SpanFromContext(ctx)
}

// answered ends a kept request's span and measure with its answer: its
// code, description and size.
func answered(r micro.Request, code, desc string, size int) {
	if t, ok := r.(*tracedRequest); ok {
		t.span.SetAttributes(attribute.Int("rpc.nats.answer_bytes", size))
		t.mark(code, desc)
		t.finish(code)
	}
}

// counts are each endpoint's answers by code ("" for a success), for the
// micro stats: micro counts only the errors a handler answers before it
// returns, and most are answered after.
type counts struct {
	mu sync.Mutex
	by map[string]map[string]int64
}

func (c *counts) add(endpoint, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]map[string]int64{}
	}
	if c.by[endpoint] == nil {
		c.by[endpoint] = map[string]int64{}
	}
	c.by[endpoint][code]++
}

// EndpointStats is what the micro stats of an endpoint carry beside
// micro's own counters: every answer, by code, whenever it was sent.
type EndpointStats struct {
	Answers int64            `json:"answers"`
	Errors  int64            `json:"errors"`
	ByCode  map[string]int64 `json:"errors_by_code,omitempty"`
}

func (c *counts) of(endpoint string) EndpointStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out EndpointStats
	for code, n := range c.by[endpoint] {
		out.Answers += n
		if code != "" {
			out.Errors += n
			if out.ByCode == nil {
				out.ByCode = map[string]int64{}
			}
			out.ByCode[code] = n
		}
	}
	return out
}
