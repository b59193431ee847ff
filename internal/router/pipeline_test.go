package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

const summaryBody = `{"id":"chatcmpl-2","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"## Goal\n- rebook flight HAT069\n## User instructions\n- pay with card 7447\n## Decisions\n- (none)\n## Facts and identifiers\n- reservation ZX81Q\n## Files and artifacts\n- (none)\n## Errors and fixes\n- (none)\n## Open tasks\n- confirm seat"},"finish_reason":"stop"}],"usage":{"prompt_tokens":900,"completion_tokens":60}}`

// A provider that fails transiently twice, then answers: one compaction,
// the usage recorded, and no breaker failure counted.
func TestTransientFailuresThenSuccess(t *testing.T) {
	srv := newServer(t, reply{status: 500, body: openAIServer}, reply{status: 429, body: openAIRateLimit, headers: map[string]string{"Retry-After": "1"}}, reply{status: 200, body: summaryBody})
	r := newRouter(t, "openai", srv.URL, &sleeps{}, time.Second)
	c, _ := tokens.ForEncoding("o200k_base")
	store, breakers := memstore.New(), memstore.NewBreakers()
	cfg := pipeline.DefaultConfig()
	cfg.SummaryModel = "gpt-4o-mini"
	svc, err := pipeline.New(store, breakers, r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []session.Message{{Role: session.RoleUser, Content: session.TextContent("Rebook flight HAT069 and please pay with card 7447.")}}
	for i := range 40 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d about reservation ZX81Q and flight HAT%03d", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("answer %d: the fare is $%d", i, 100+i))})
	}
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	ctx := context.Background()
	store.Create(ctx, session.Record{SessionID: "s", Model: "gpt-4o", ContextLimit: 1500}, msgs)
	res, err := svc.Compact(ctx, pipeline.Request{ID: "r", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("%v %+v", err, res)
	}
	if srv.count() != 3 || res.LLMCalls != 1 || res.InstructionsDropped != 0 || res.InputTokens != 900 || res.OutputTokens != 60 || res.SummaryModel != "gpt-4o-mini" {
		t.Fatalf("%d HTTP calls; result %+v", srv.count(), res)
	}
	if b, _ := breakers.Breaker(ctx, "s"); b.Failures != 0 {
		t.Fatalf("transient failures counted: %+v", b)
	}
	if _, comps, _ := store.History(ctx, "s"); len(comps) != 1 || comps[0].Compaction.SummaryText == "" {
		t.Fatalf("%d compactions", len(comps))
	}
}

// An auth error fails at once, is not retryable, and counts one failure.
func TestAuthErrorFailsFast(t *testing.T) {
	srv := newServer(t, reply{status: 401, body: openAIAuth})
	r := newRouter(t, "openai", srv.URL, &sleeps{}, time.Second)
	c, _ := tokens.ForEncoding("o200k_base")
	store, breakers := memstore.New(), memstore.NewBreakers()
	svc, _ := pipeline.New(store, breakers, r, pipeline.DefaultConfig())
	var msgs []session.Message
	for i := range 40 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprint("q ", i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprint("a ", i))})
	}
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	store.Create(context.Background(), session.Record{SessionID: "s", Model: "gpt-4o"}, msgs)
	res, err := svc.Compact(context.Background(), pipeline.Request{ID: "r", SessionID: "s", Trigger: pipeline.TriggerOverflow})
	if err == nil || res.Reason != pipeline.ReasonSummaryFailed || res.Retryable || srv.count() != 1 || res.Failures != 1 {
		t.Fatalf("%v %+v (%d calls)", err, res, srv.count())
	}
}
