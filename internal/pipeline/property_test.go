package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

var words = []string{"flight", "HAT069", "refund", "JFK", "2024-05-20", "reservation", "ZX81Q", "/src/main.go", "error:", "timeout",
	"passenger", "Ada", "Lovelace", "$451", "economy", "baggage", "policy", "cancelled", "retry", "config.yaml", "the", "and", "then"}

func text(t *rapid.T, label string, maxWords int) string {
	n := rapid.IntRange(1, maxWords).Draw(t, label+"_n")
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[rapid.IntRange(0, len(words)-1).Draw(t, label+"_w")])
		if rapid.IntRange(0, 9).Draw(t, label+"_dot") == 0 {
			sb.WriteString(".")
		}
	}
	return sb.String()
}

// genTurns draws agent turns: a user message, then assistant steps that are
// answers or tool calls (one to three) followed by their results; some
// outputs are huge, and some turns are single giant agent runs.
func genTurns(t *rapid.T, first int, calls *int) []session.Message {
	var out []session.Message
	turns := rapid.IntRange(1, 14).Draw(t, "turns")
	for i := range turns {
		out = append(out, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("turn %d: %s", first+i, text(t, "user", 30)))})
		steps := rapid.IntRange(0, 4).Draw(t, "steps")
		if rapid.IntRange(0, 12).Draw(t, "giant") == 0 {
			steps = rapid.IntRange(20, 60).Draw(t, "giant_steps")
		}
		for range steps {
			if rapid.Bool().Draw(t, "tool") {
				k := rapid.IntRange(1, 3).Draw(t, "calls")
				m := session.Message{Role: session.RoleAssistant}
				var ids []string
				for range k {
					*calls++
					id := fmt.Sprintf("call_%d", *calls)
					ids = append(ids, id)
					m.ToolCalls = append(m.ToolCalls, session.ToolCall{ID: id, Type: "function", Function: session.FunctionCall{Name: "lookup", Arguments: `{"q":"` + text(t, "arg", 5) + `"}`}})
				}
				out = append(out, m)
				for _, id := range ids {
					body := text(t, "result", 40)
					if rapid.IntRange(0, 15).Draw(t, "huge") == 0 {
						body = strings.Repeat(body+"\n", rapid.IntRange(100, 600).Draw(t, "repeat"))
					}
					out = append(out, session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(body)})
				}
			} else {
				out = append(out, session.Message{Role: session.RoleAssistant, Content: session.TextContent(text(t, "answer", 40))})
			}
		}
	}
	return out
}

func genSession(t *rapid.T, calls *int) []session.Message {
	var out []session.Message
	for i := range rapid.IntRange(0, 2).Draw(t, "system") {
		out = append(out, session.Message{Role: session.RoleSystem, Content: session.TextContent(fmt.Sprintf("system %d: %s", i, text(t, "sys", 60)))})
	}
	return append(out, genTurns(t, 0, calls)...)
}

func TestPropertyCompaction(t *testing.T) {
	c := counter(t)
	rapid.Check(t, func(t *rapid.T) {
		cfg := pipeline.DefaultConfig()
		cfg.KeepRecentTurns = rapid.IntRange(1, 5).Draw(t, "keep")
		cfg.MaxSummaryTokens = rapid.SampledFrom([]int{200, 500, 1000}).Draw(t, "max_summary")
		cfg.MaxMessages = rapid.SampledFrom([]int{0, 50}).Draw(t, "max_messages")
		limit := rapid.IntRange(4*cfg.MaxSummaryTokens, 30000).Draw(t, "limit")
		if rapid.Bool().Draw(t, "small_summary_model") {
			cfg.SummaryContextLimit = pipeline.MinSummaryContextLimit(cfg.MaxSummaryTokens)
		}
		trigger := rapid.SampledFrom([]pipeline.Trigger{pipeline.TriggerOverBudget, pipeline.TriggerOverflow}).Draw(t, "trigger")
		calls := 0
		msgs := genSession(t, &calls)

		rec := &recorder{next: extractive.New(c)}
		store, breakers := memstore.New(), memstore.NewBreakers()
		svc, err := pipeline.New(store, breakers, rec, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			c.Ensure(&msgs[i])
		}
		ctx := context.Background()
		if _, err := store.Create(ctx, session.Record{SessionID: "s", Model: "gpt-4o", ContextLimit: limit}, msgs); err != nil {
			t.Fatal(err)
		}
		req := pipeline.Request{ID: "r1", SessionID: "s", Trigger: trigger}
		res, err := svc.Compact(ctx, req)
		if err != nil {
			if errors.Is(err, pipeline.ErrInvariant) {
				t.Fatalf("the pipeline built a context that breaks an invariant: %v", err)
			}
			if !errors.Is(err, pipeline.ErrInsufficientProgress) {
				t.Fatalf("unexpected failure: %v", err)
			}
			return
		}
		if res.Outcome != pipeline.OutcomeCompacted {
			return
		}
		sess, _ := store.Load(ctx, "s", false)
		out := pipeline.ContextOf(sess)
		all, _, _ := store.History(ctx, "s")

		// Pinned leading system messages are kept, first.
		for i := range all {
			if all[i].Role != session.RoleSystem {
				break
			}
			if out[i].ID != all[i].ID {
				t.Fatalf("pinned message %d lost", i)
			}
		}
		// No call separated from its results, summary and context in budget.
		if err := eval.CheckContext(all, out, c.Context(out), limit, c, cfg.MaxSummaryTokens); err != nil {
			t.Fatal(err)
		}
		// The last K turns stay raw unless they alone overflow the headroom.
		users := 0
		turnStart := 0
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].Role == session.RoleUser {
				users++
				if users == cfg.KeepRecentTurns {
					turnStart = i
					break
				}
			}
		}
		if users == cfg.KeepRecentTurns && int64(turnStart+1) < sess.Record.TailStartSeq {
			lastK, pinned := 0, 3
			for _, m := range all[turnStart:] {
				lastK += m.Tokens
			}
			for i := 0; i < len(all) && all[i].Role == session.RoleSystem; i++ {
				pinned += all[i].Tokens
			}
			reserve := cfg.MaxSummaryTokens + 3 // the whole compaction message's bound
			overBudget := float64(lastK+pinned+reserve) > cfg.HeadroomRatio*float64(limit) || lastK+pinned+reserve > limit
			overCount := cfg.MaxMessages > 0 && len(all)-turnStart > cfg.MaxMessages-2
			if !overBudget && !overCount {
				t.Fatalf("the last %d turns (%d tokens) were summarised although they fit", cfg.KeepRecentTurns, lastK)
			}
		}

		// The same request again (a redelivery) answers what it did and
		// changes nothing; another request finds nothing new to compact.
		recBefore, _ := store.Record(ctx, "s")
		callsBefore := len(rec.requests())
		again, err := svc.Compact(ctx, req)
		if err != nil || again.Outcome != res.Outcome || again.CompactionMessageID != res.CompactionMessageID || again.TokensAfter != res.TokensAfter {
			t.Fatalf("redelivered request answered differently: %v %+v, first %+v", err, again, res)
		}
		if recAfter, _ := store.Record(ctx, "s"); recAfter.Revision != recBefore.Revision || len(rec.requests()) != callsBefore {
			t.Fatal("a repeated request changed the session or called the model")
		}
		// After a summary, another request finds nothing new to compact.
		// After a clearing (no model call, the context under its target), an
		// over-budget request finds nothing to do; an overflow (the
		// provider still refuses) may go on down the ladder to a summary.
		if res.Strategy == "cleared" && (res.LLMCalls != 0 || res.ToolResultsCleared == 0 || res.ClearedTokens <= 0) {
			t.Fatalf("a clearing that calls the model or clears nothing: %+v", res)
		}
		// Another over-budget request finds the context within its limit;
		// another overflow (the provider still refuses) may go on down the
		// ladder, and then makes the context smaller again.
		other, err := svc.Compact(ctx, pipeline.Request{ID: "r1b", SessionID: "s", Trigger: trigger})
		switch {
		case err != nil && !errors.Is(err, pipeline.ErrInsufficientProgress):
			t.Fatalf("a second request failed: %v", err)
		case err == nil && other.Outcome == pipeline.OutcomeCompacted && trigger == pipeline.TriggerOverBudget:
			t.Fatalf("a second over-budget request compacted again: %+v (first %+v)", other, res)
		case err == nil && other.Outcome == pipeline.OutcomeCompacted && other.TokensAfter >= other.TokensBefore:
			t.Fatalf("a second compaction did not shrink the context: %+v", other)
		}
		recBefore, _ = store.Record(ctx, "s")

		// Incremental: new turns, then only they reach the model.
		if _, err := store.Append(ctx, "s", genTurns(t, 100, &calls)...); err != nil {
			t.Fatal(err)
		}
		n := len(rec.requests())
		res2, err := svc.Compact(ctx, pipeline.Request{ID: "r2", SessionID: "s", Trigger: pipeline.TriggerOverflow})
		if err != nil {
			if errors.Is(err, pipeline.ErrInvariant) {
				t.Fatalf("second compaction broke an invariant: %v", err)
			}
			return
		}
		for _, r := range rec.requests()[n:] {
			for _, m := range r.Messages {
				if r.Task == pipeline.TaskSummarise && m.Seq < recBefore.TailStartSeq && !m.IsCompaction && !isPinned(recBefore, m.Seq) {
					t.Fatalf("incremental compaction sent message seq %d, before the previous tail start %d", m.Seq, recBefore.TailStartSeq)
				}
			}
		}
		if res2.Outcome == pipeline.OutcomeCompacted {
			sess2, _ := store.Load(ctx, "s", false)
			all2, _, _ := store.History(ctx, "s")
			out2 := pipeline.ContextOf(sess2)
			if err := eval.CheckContext(all2, out2, c.Context(out2), limit, c, cfg.MaxSummaryTokens); err != nil {
				t.Fatalf("second compaction: %v", err)
			}
		}
	})
}

func isPinned(r session.Record, seq int64) bool {
	for _, p := range r.PinnedSeqs {
		if p == seq {
			return true
		}
	}
	return false
}
