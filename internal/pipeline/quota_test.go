package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// budget is a tenant's model budget of calls left.
type budget struct {
	left, used int
}

func (b *budget) Take(ctx context.Context) error {
	if b.left <= 0 {
		return &tenant.QuotaError{Tenant: tenant.From(ctx), Quota: tenant.QuotaModelCallsPerHour, Limit: 1, RetryAfter: 20 * time.Minute}
	}
	b.left--
	return nil
}

func (b *budget) Used(_ context.Context, tokens int) { b.used += tokens }

// A compaction that needs a model call its tenant's budget refuses fails
// with quota_exceeded, naming the quota and when it has room again: not
// retried, nothing committed, and the session's breaker not moved. One
// the budget allows counts its tokens.
func TestModelBudgetRefusesACall(t *testing.T) {
	b := &budget{}
	store, breakers := memstore.New(), memstore.NewBreakers()
	rec := &recorder{next: extractive.New(counter(t))}
	svc, err := pipeline.New(store, breakers, rec, pipeline.DefaultConfig(), pipeline.WithModelBudget(b))
	if err != nil {
		t.Fatal(err)
	}
	ctx := tenant.With(context.Background(), "TENANT_A")
	msgs := chat(30)
	c := counter(t)
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	if _, err := store.Create(ctx, session.Record{SessionID: "s", Model: "gpt-4o", ContextLimit: 3000}, msgs); err != nil {
		t.Fatal(err)
	}
	res, err := svc.Compact(ctx, pipeline.Request{ID: "r1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err == nil || res.Reason != pipeline.ReasonQuotaExceeded || res.Quota != tenant.QuotaModelCallsPerHour ||
		res.RetryAfterMS != (20*time.Minute).Milliseconds() || res.Retryable || rec.count.Load() != 0 {
		t.Fatalf("over the budget: %v %+v (%d calls)", err, res, rec.count.Load())
	}
	var qe *tenant.QuotaError
	if !errors.As(err, &qe) || qe.Tenant != "TENANT_A" {
		t.Fatalf("the error is no quota error of the tenant: %v", err)
	}
	if br, _ := breakers.Breaker(ctx, "s"); br.Failures != 0 {
		t.Fatalf("the refusal moved the breaker: %+v", br)
	}
	if sess, _ := store.Load(ctx, "s", false); sess.Record.CompactionID != "" {
		t.Fatal("a refused compaction committed")
	}
	b.left = 10
	res, err = svc.Compact(ctx, pipeline.Request{ID: "r2", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || b.used < res.InputTokens+res.OutputTokens || b.used == 0 {
		t.Fatalf("within the budget: %v %+v, %d tokens counted", err, res, b.used)
	}
}
