package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

// DefaultSource is the CloudEvents source of the events the service writes.
const DefaultSource = "urn:compactor"

// publishTimeout bounds one publish; results are published even while the
// service shuts down, so it does not follow the caller's cancellation.
const publishTimeout = 10 * time.Second

// Publisher writes the service's events to COMPACTION_EVENTS in binary
// mode, each with a deterministic id that is also its Nats-Msg-Id, so a
// publish repeated after a crash or a redelivery is stored once.
type Publisher struct {
	JS     jetstream.JetStream
	Source string
	Now    func() time.Time
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
	ev, err := events.NewEvent(id, typ, src, sessionID, p.now(), data)
	if err != nil {
		return fmt.Errorf("build %s event: %w", typ, err)
	}
	h, body := events.EncodeBinary(ev)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if _, err := p.JS.PublishMsg(ctx, &nats.Msg{Subject: events.Subject(typ, sessionID), Header: h, Data: body}); err != nil {
		return fmt.Errorf("publish %s: %w", typ, err)
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
	if res.CircuitClosed {
		b := session.Breaker{SessionID: res.SessionID, Failures: res.Failures}
		if res.Breaker != nil {
			b = *res.Breaker
		}
		return p.CircuitClosed(ctx, b, "probe")
	}
	return nil
}

// Outcome publishes only the result event of a request.
func (p *Publisher) Outcome(ctx context.Context, res *pipeline.Result) error {
	id := events.RequestResultID(res.RequestID)
	if res.Failed {
		return p.publish(ctx, id, events.TypeCompactionFailed, res.SessionID, events.FailedData(res))
	}
	return p.publish(ctx, id, events.TypeCompactionCompleted, res.SessionID, res)
}

// CircuitOpened publishes CompactionCircuitOpened for the failure that
// opened a breaker.
func (p *Publisher) CircuitOpened(ctx context.Context, res *pipeline.Result) error {
	d := events.CircuitOpenedData(res)
	return p.publish(ctx, events.CircuitID(res.SessionID, d.OpenedAt, events.TypeCompactionCircuitOpened),
		events.TypeCompactionCircuitOpened, res.SessionID, d)
}

// CircuitClosed publishes CompactionCircuitClosed for breaker prev (its
// state while open), closed by "operator" or "probe".
func (p *Publisher) CircuitClosed(ctx context.Context, prev session.Breaker, by string) error {
	var opened time.Time
	if prev.OpenedAt != nil {
		opened = *prev.OpenedAt
	}
	d := events.CircuitClosed{SessionID: prev.SessionID, Failures: prev.Failures, ClosedAt: p.now().UTC(), By: by}
	return p.publish(ctx, events.CircuitID(prev.SessionID, opened, events.TypeCompactionCircuitClosed),
		events.TypeCompactionCircuitClosed, prev.SessionID, d)
}
