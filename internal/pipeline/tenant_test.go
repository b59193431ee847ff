package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// A tenant's policy names the summary model of its requests (a request
// that names its own wins); another tenant's and the default tenant's
// requests use the service's; a new policy applies to the next request.
func TestTenantPolicyNamesTheSummaryModel(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.SummaryModel = "gpt-4o"
	rec := &modelRecorder{next: extractive.New(counter(t))}
	e := newEnv(t, rec, cfg)
	e.svc.SetTenantPolicies(map[string]pipeline.TenantPolicy{"A": {SummaryModel: "gpt-4o-mini", SummaryContextLimit: 16000}})
	ctxOf := map[string]context.Context{"A": tenant.With(context.Background(), "A"), "B": tenant.With(context.Background(), "B"), "_": context.Background()}
	for _, ctx := range ctxOf {
		for _, id := range []string{"s1", "s2"} {
			msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a travel agent.")}}
			for i := range 40 {
				msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Turn %d: can I change flight HAT%03d to a later one today?", i, i))},
					session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Yes: flight HAT%03d has seats at 18:%02d; shall I book it?", i+1, i))})
			}
			for i := range msgs {
				e.counter.Ensure(&msgs[i])
			}
			if _, err := e.store.Create(ctx, session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: 1500}, msgs); err != nil {
				t.Fatal(err)
			}
		}
	}
	compact := func(tn, sid, model string) string {
		t.Helper()
		rec.reset()
		res, err := e.svc.Compact(ctxOf[tn], pipeline.Request{ID: tn + sid, SessionID: sid, Trigger: pipeline.TriggerOverBudget, SummaryModel: model})
		if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.LLMCalls == 0 {
			t.Fatalf("%s/%s: %+v %v", tn, sid, res, err)
		}
		return rec.model()
	}
	for tn, want := range map[string]string{"A": "gpt-4o-mini", "B": "gpt-4o", "_": "gpt-4o"} {
		if got := compact(tn, "s1", ""); got != want {
			t.Errorf("tenant %s summarised with %s, want %s", tn, got, want)
		}
	}
	if got := compact("A", "s2", "gpt-4.1"); got != "gpt-4.1" {
		t.Errorf("a request naming its model summarised with %s", got)
	}
	e.svc.SetTenantPolicies(map[string]pipeline.TenantPolicy{"B": {SummaryModel: "gpt-4.1-mini"}})
	if got := compact("B", "s2", ""); got != "gpt-4.1-mini" {
		t.Errorf("after a new policy, B summarised with %s", got)
	}
}

// modelRecorder records the model each summary call asks for.
type modelRecorder struct {
	next   pipeline.Summarizer
	mu     sync.Mutex
	models []string
}

func (r *modelRecorder) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	r.mu.Lock()
	r.models = append(r.models, req.Model)
	r.mu.Unlock()
	return r.next.Summarize(ctx, req)
}

func (r *modelRecorder) reset() { r.mu.Lock(); r.models = nil; r.mu.Unlock() }

// model is the one model the calls since reset asked for ("" when none,
// "mixed" when several).
func (r *modelRecorder) model() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := ""
	for _, m := range r.models {
		if out != "" && m != out {
			return "mixed"
		}
		out = m
	}
	return out
}
