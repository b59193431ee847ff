package events

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
)

// DefaultSource is the CloudEvents source of the events the service writes.
const DefaultSource = "urn:compactor"

// publishTimeout bounds one publish; results are published even while the
// service shuts down, so it does not follow the caller's cancellation.
const publishTimeout = 10 * time.Second

// Publisher writes the service's events to COMPACTION_EVENTS in binary
// mode, each with a deterministic id that is also its Nats-Msg-Id, so a
// publish repeated after a crash or a redelivery is stored once. Both
// drivers (the durable consumer and the synchronous compact endpoint)
// publish through it, by the one rule of Dispose.
type Publisher struct {
	JS     jetstream.JetStream
	Source string
	Now    func() time.Time
	// Stream is the result stream (COMPACTION_EVENTS), read by Once to
	// tell whether a request's result is stored already; empty: Once
	// always publishes.
	Stream string
}

func (p *Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Publisher) publish(ctx context.Context, id, typ, sessionID string, data any) error {
	src := p.Source
	if src == "" {
		src = DefaultSource
	}
	ev, err := NewEvent(id, typ, src, sessionID, p.now(), data)
	if err != nil {
		return fmt.Errorf("build %s event: %w", typ, err)
	}
	// A PRODUCER span per event: its context is what the event carries
	// onward (with no traces exported, the request's own).
	route, _ := contract.RouteOf(typ)
	ctx, span := telemetry.Tracer().Start(ctx, "send "+route.Prefix+"{session_id}", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", route.Prefix+"{session_id}"), attribute.String("cloudevents.event_id", id),
			attribute.String("cloudevents.event_source", src), attribute.String("cloudevents.event_type", typ),
			attribute.String("gen_ai.conversation.id", sessionID)))
	defer span.End()
	traceFrom(ctx).apply(&ev)
	// A tenant's events go to its subjects (exported to it alone), say
	// its name, and their dedup ids are its own: another tenant's request
	// of the same id is another request.
	t := tenant.From(ctx)
	if t != tenant.Default {
		ev.SetExtension("tenant", t)
	}
	h, body := EncodeBinary(ev)
	h[jetstream.MsgIDHeader] = []string{tenant.MsgID(t, id)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if _, err := p.JS.PublishMsg(ctx, &nats.Msg{Subject: tenant.Subject(t, contract.Subject(typ, sessionID)), Header: h, Data: body}); err != nil {
		err = fmt.Errorf("publish %s: %w", typ, err)
		telemetry.Fail(span, err)
		return err
	}
	return nil
}

// Result publishes what a request's result says: CompactionCircuitOpened
// when it opened the breaker, its one result event (CompactionCompleted or
// CompactionFailed), and CompactionCircuitClosed when it was a probe that
// closed the breaker.
func (p *Publisher) Result(ctx context.Context, res *pipeline.Result) error {
	if res.CircuitOpened {
		if err := p.CircuitOpened(ctx, res); err != nil {
			return err
		}
	}
	if err := p.Outcome(ctx, res); err != nil {
		return err
	}
	return p.probeClosed(ctx, res)
}

// Once is Result for a request that may have been answered before (a
// redelivery, a repeated synchronous request): when its result event is
// stored already, it is not published again (JetStream's dedup would keep
// the stream to one, but a core subscriber would see it twice); only a
// probe's CircuitClosed, published after it, is published (again, under
// its fixed id). again says the request may have been answered before.
func (p *Publisher) Once(ctx context.Context, res *pipeline.Result, again bool) error {
	if !again || !p.stored(ctx, res) {
		return p.Result(ctx, res)
	}
	return p.probeClosed(ctx, res)
}

// stored reports whether the request's result event is the last stored on
// its subject (read from the stream's leader); an error answers false: the
// publish then happens, and dedup keeps the stream to one.
func (p *Publisher) stored(ctx context.Context, res *pipeline.Result) bool {
	if p.Stream == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	st, err := p.JS.Stream(ctx, p.Stream)
	if err != nil {
		return false
	}
	typ := contract.TypeCompactionCompleted
	if res.Failed {
		typ = contract.TypeCompactionFailed
	}
	t := tenant.From(ctx)
	m, err := st.GetLastMsgForSubject(ctx, tenant.Subject(t, contract.Subject(typ, res.SessionID)))
	return err == nil && m.Header.Get(jetstream.MsgIDHeader) == tenant.MsgID(t, contract.ResultEventID(res.RequestID, res.Failed))
}

// probeClosed publishes CompactionCircuitClosed when res is a probe that
// closed its breaker (under the opening's fixed id, so again is harmless).
func (p *Publisher) probeClosed(ctx context.Context, res *pipeline.Result) error {
	if !res.CircuitClosed {
		return nil
	}
	b := session.Breaker{SessionID: res.SessionID, Failures: res.Failures}
	if res.Breaker != nil {
		b = *res.Breaker
	}
	return p.CircuitClosed(ctx, b, "probe")
}

// dropResult is nil but in a deliberately broken build (broken_chaos.go,
// build tag chaosbroken), which `compactor chaos` must catch.
var dropResult func() bool

// Outcome publishes only the result event of a request: each kind once
// per request (a repeat is a duplicate), so a completion after a
// retryable failure of the same request is stored after it.
func (p *Publisher) Outcome(ctx context.Context, res *pipeline.Result) error {
	if dropResult != nil && dropResult() {
		return nil
	}
	id := contract.ResultEventID(res.RequestID, res.Failed)
	if res.Failed {
		return p.publish(ctx, id, contract.TypeCompactionFailed, res.SessionID, FailedData(res))
	}
	return p.publish(ctx, id, contract.TypeCompactionCompleted, res.SessionID, res)
}

// CircuitOpened publishes CompactionCircuitOpened for the failure that
// opened a breaker.
func (p *Publisher) CircuitOpened(ctx context.Context, res *pipeline.Result) error {
	d := CircuitOpenedData(res)
	return p.publish(ctx, contract.CircuitID(res.SessionID, d.OpenedAt, contract.TypeCompactionCircuitOpened),
		contract.TypeCompactionCircuitOpened, res.SessionID, d)
}

// CircuitClosed publishes CompactionCircuitClosed for breaker prev (its
// state while open), closed by "operator" or "probe".
func (p *Publisher) CircuitClosed(ctx context.Context, prev session.Breaker, by string) error {
	var opened time.Time
	if prev.OpenedAt != nil {
		opened = *prev.OpenedAt
	}
	d := CircuitClosed{SessionID: prev.SessionID, Failures: prev.Failures, ClosedAt: p.now().UTC(), By: by}
	return p.publish(ctx, contract.CircuitID(prev.SessionID, opened, contract.TypeCompactionCircuitClosed),
		contract.TypeCompactionCircuitClosed, prev.SessionID, d)
}

// Disposition is what a driver does with a request's result: the durable
// consumer and the synchronous compact endpoint follow the one rule of
// Dispose, so what is published for a request does not depend on how it
// came.
type Disposition int

// Dispositions.
const (
	// Answer: publish the result's events, then acknowledge the request
	// (the consumer) or reply with it (the endpoint).
	Answer Disposition = iota
	// Retry: publish nothing; the request is tried again (the consumer
	// redelivers it later; the endpoint answers 503 and its caller repeats
	// it with the same request id). Its one result event is still to come.
	Retry
	// Reject: publish the CompactionFailed and keep the request as a dead
	// letter (the consumer) or answer it as refused (the endpoint): no
	// retry can change the answer.
	Reject
)

// Dispose decides what happens to a request's result. interrupted says the
// driver itself stopped the work (its shutdown, its caller gone): the work
// was not done, so nothing is published. last says no retry will follow
// (the consumer's last delivery): a transient failure is then answered and
// kept as a dead letter.
//
// A summary that failed after the provider's retry budget is answered at
// once (CompactionFailed, summary_failed, retryable): the runtime learns
// it, and the breaker counts the request once. Failures of the store or of
// the process (persist_failed, a timeout) are retried.
func Dispose(res *pipeline.Result, interrupted, last bool) Disposition {
	switch {
	case !res.Failed:
		return Answer
	case interrupted:
		return Retry
	case res.Reason == pipeline.ReasonInvalidRequest, res.Reason == pipeline.ReasonCorruptSession:
		return Reject
	case res.Retryable && res.Reason != pipeline.ReasonSummaryFailed:
		if last {
			return Reject
		}
		return Retry
	}
	return Answer
}

// ResetBreaker closes a session's breaker and, when it was open, publishes
// CompactionCircuitClosed (by "operator"). It returns the breaker's state
// before the reset. Resetting a closed breaker changes and publishes
// nothing; resetting one opening twice publishes one event.
func ResetBreaker(ctx context.Context, svc BreakerResetter, pub *Publisher, sessionID string) (session.Breaker, error) {
	prev, err := svc.ResetBreaker(ctx, sessionID)
	if err != nil {
		return prev, err
	}
	if prev.Open() {
		if err := pub.CircuitClosed(ctx, prev, "operator"); err != nil {
			return prev, err
		}
	}
	return prev, nil
}

// BreakerResetter closes a session's breaker and returns its state before
// (sessions.Service).
type BreakerResetter interface {
	ResetBreaker(ctx context.Context, sessionID string) (session.Breaker, error)
}

// ResetAll resets every breaker in list (an operator's move after an
// outage) and returns the states before the reset, stopping at the first
// error.
func ResetAll(ctx context.Context, svc BreakerResetter, pub *Publisher, list []session.Breaker) ([]session.Breaker, error) {
	out := make([]session.Breaker, 0, len(list))
	for _, b := range list {
		prev, err := ResetBreaker(ctx, svc, pub, b.SessionID)
		if err != nil {
			return out, fmt.Errorf("reset breaker %s: %w", b.SessionID, err)
		}
		out = append(out, prev)
	}
	return out, nil
}

// HeaderValue makes text safe as one header value: one line, no control
// characters, at most 1 KB.
func HeaderValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < 0x20 && r != '\t' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
