package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/wire"
)

// ServiceLoop replays through the service as a runtime uses it: an
// embedded nats-server, sessions in KV, requests and results as
// CloudEvents through the durable consumer, the extractive model.
type ServiceLoop struct {
	e       *env
	counter *tokens.Counter
}

var _ eval.Loop = (*ServiceLoop)(nil)

// NewServiceLoop starts the server and the service under cfg. Close stops
// them and removes their store.
func NewServiceLoop(ctx context.Context, cfg pipeline.Config) (*ServiceLoop, error) {
	e, err := startEnvWith(ctx, 8, cfg)
	if err != nil {
		return nil, err
	}
	counter, err := tokens.ForEncoding(e.table.Lookup("gpt-4o").Encoding)
	if err != nil {
		e.close()
		return nil, err
	}
	return &ServiceLoop{e: e, counter: counter}, nil
}

// Close stops the service and the server.
func (l *ServiceLoop) Close() { l.e.close() }

func (l *ServiceLoop) Create(ctx context.Context, id string, limit int) error {
	_, err := l.e.sessions.Create(ctx, session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: limit}, nil)
	return err
}

func (l *ServiceLoop) Append(ctx context.Context, id string, m session.Message) (int, error) {
	if _, err := l.e.sessions.Append(ctx, id, []session.Message{m}, session.AppendOptions{}); err != nil {
		return 0, err
	}
	// As the service counts it, with the session model's encoding (the
	// count is cached: the service's own count of it encodes nothing).
	m.Tokens = 0
	return l.counter.Message(&m), nil
}

func (l *ServiceLoop) View(ctx context.Context, id string) ([]session.Message, error) {
	v, err := l.e.sessions.Context(ctx, id)
	return v.Messages, err
}

// Compact publishes a ContextOverBudget event and waits for its result
// event; a CompactionFailed answers a failed result and an error wrapping
// the pipeline's sentinel for its reason.
func (l *ServiceLoop) Compact(ctx context.Context, id, requestID string) (*pipeline.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done, err := l.e.client.Compact(ctx, id, client.CompactRequest{RequestID: requestID, Model: "gpt-4o"})
	var failed *client.FailedError
	switch {
	case err == nil:
		return wire.Convert[*pipeline.Result](done)
	case !errors.As(err, &failed):
		return nil, err
	}
	f := failed.Failed
	res := &pipeline.Result{SessionID: f.SessionID, RequestID: f.RequestID, Trigger: pipeline.Trigger(f.Trigger), Failed: true,
		Reason: pipeline.Reason(f.Reason), Error: f.Error, Failures: f.Failures, Retryable: f.Retryable,
		LLMCalls: f.LLMCalls, InputTokens: f.InputTokens, OutputTokens: f.OutputTokens, DurationMS: f.DurationMS}
	sentinel := pipeline.ErrSummaryFailed
	switch res.Reason {
	case pipeline.ReasonInvariantViolated:
		sentinel = pipeline.ErrInvariant
	case pipeline.ReasonCircuitOpen:
		sentinel = pipeline.ErrCircuitOpen
	case pipeline.ReasonInsufficientProgress:
		sentinel = pipeline.ErrInsufficientProgress
	}
	return res, fmt.Errorf("%w: %s: %s", sentinel, f.Reason, f.Error)
}

func (l *ServiceLoop) History(ctx context.Context, id string) ([]session.Message, error) {
	all, _, err := l.e.store.History(ctx, id)
	return all, err
}

func (l *ServiceLoop) TailStart(ctx context.Context, id string) (int64, error) {
	rec, err := l.e.store.Record(ctx, id)
	return rec.TailStartSeq, err
}
