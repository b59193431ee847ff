package pipeline_test

import (
	"context"
	"fmt"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// Compact a session that has outgrown a 3,000-token window, then ask again:
// the second request finds the context fitting.
func ExampleService_Compact() {
	ctx := context.Background()
	counter, _ := tokens.ForEncoding("o200k_base")
	store, breakers := memstore.New(), memstore.NewBreakers()
	svc, _ := pipeline.New(store, breakers, extractive.New(counter), pipeline.DefaultConfig())

	msgs := chat(30) // a system prompt and 30 agent turns with tool calls
	for i := range msgs {
		counter.Ensure(&msgs[i])
	}
	store.Create(ctx, session.Record{SessionID: "s1", Model: "gpt-4o", ContextLimit: 3000}, msgs)

	res, _ := svc.Compact(ctx, pipeline.Request{ID: "req-1", SessionID: "s1", Trigger: pipeline.TriggerOverBudget})
	fmt.Println(res.Outcome, res.Decision, res.TokensBefore > 3000, res.TokensAfter <= 3000)

	again, _ := svc.Compact(ctx, pipeline.Request{ID: "req-2", SessionID: "s1", Trigger: pipeline.TriggerOverBudget})
	fmt.Println(again.Outcome, again.LLMCalls)

	s, _ := store.Load(ctx, "s1", false)
	view := pipeline.ContextOf(s)
	fmt.Println(view[0].Role, view[1].IsCompaction, view[2].Role)
	// Output:
	// compacted tokens_over_limit true true
	// noop 0
	// system true user
}
