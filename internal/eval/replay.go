package eval

import (
	"context"
	"errors"
	"fmt"

	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// Report is one conversation replayed through the runtime loop.
type Report struct {
	Name        string     `json:"name"`
	Source      string     `json:"source"`
	Limit       int        `json:"context_limit"`
	Incremental bool       `json:"incremental"`
	Messages    int        `json:"messages"`
	Tokens      int        `json:"tokens"` // every message counted once: the floor of model input
	Compactions int        `json:"compactions"`
	Failures    int        `json:"failures"`     // failed compactions (circuit_open refusals aside)
	CircuitOpen bool       `json:"circuit_open"` // the breaker opened during the replay
	LLMCalls    int        `json:"llm_calls"`
	InputTokens int        `json:"summary_input_tokens"`
	FinalTokens int        `json:"final_context_tokens"`
	MaxTokens   int        `json:"max_context_tokens"` // the largest context the runtime sent
	TokensSaved int        `json:"tokens_saved"`       // Tokens - FinalTokens
	CostRatio   float64    `json:"input_over_floor"`   // InputTokens / Tokens
	Retention   *Retention `json:"retention,omitempty"`
}

// Replay runs the runtime loop a compactor serves: messages arrive one by
// one; whenever the context the runtime would send is over limit, it asks
// for a compaction; after every compaction the context's invariants are
// checked. It returns an error for a broken invariant, never for a failed
// compaction (counted in the report).
func Replay(ctx context.Context, c transcript.Conversation, counter *tokens.Counter, sum pipeline.Summarizer, cfg pipeline.Config, limit int) (Report, error) {
	rep := Report{Name: c.Name, Source: c.Source, Limit: limit, Incremental: cfg.EnableIncremental, Messages: len(c.Messages)}
	store := memstore.New()
	svc, err := pipeline.New(store, memstore.NewBreakers(), sum, cfg)
	if err != nil {
		return rep, err
	}
	msgs := make([]session.Message, len(c.Messages))
	copy(msgs, c.Messages)
	for i := range msgs {
		rep.Tokens += counter.Ensure(&msgs[i])
	}
	const id = "replay"
	if _, err := store.Create(ctx, session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: limit}, nil); err != nil {
		return rep, err
	}
	for i := range msgs {
		if _, err := store.Append(ctx, id, msgs[i]); err != nil {
			return rep, err
		}
		view, n, err := contextOf(ctx, store, counter, id)
		if err != nil {
			return rep, err
		}
		if n <= limit && (cfg.MaxMessages == 0 || len(view) <= cfg.MaxMessages) {
			rep.MaxTokens = max(rep.MaxTokens, n)
			continue
		}
		res, err := svc.Compact(ctx, pipeline.Request{ID: fmt.Sprint(i), SessionID: id, Trigger: pipeline.TriggerOverBudget})
		rep.LLMCalls += res.LLMCalls
		rep.InputTokens += res.InputTokens
		if err != nil {
			if errors.Is(err, pipeline.ErrInvariant) {
				return rep, fmt.Errorf("%s message %d: %w", c.Name, i, err)
			}
			if errors.Is(err, pipeline.ErrCircuitOpen) {
				rep.CircuitOpen = true
			} else {
				rep.Failures++
			}
		} else if res.Outcome == pipeline.OutcomeCompacted {
			rep.Compactions++
			all, _, _ := store.History(ctx, id)
			var after []session.Message
			after, n, _ = contextOf(ctx, store, counter, id)
			if err := CheckContext(all, after, n, limit, counter, cfg.MaxSummaryTokens); err != nil {
				return rep, fmt.Errorf("%s after message %d: %w", c.Name, i, err)
			}
		}
		// n is the context the runtime sends next: compacted, or as it was
		// when the compaction did not happen.
		rep.MaxTokens = max(rep.MaxTokens, n)
	}
	final, n, err := contextOf(ctx, store, counter, id)
	if err != nil {
		return rep, err
	}
	rep.FinalTokens = n
	rep.TokensSaved = rep.Tokens - rep.FinalTokens
	if rep.Tokens > 0 {
		rep.CostRatio = float64(rep.InputTokens) / float64(rep.Tokens)
	}
	if len(c.QA) > 0 {
		rec, _ := store.Record(ctx, id)
		view := final
		r := Measure(c, func(i int) bool { return int64(i+1) < rec.TailStartSeq }, ContextUnits(view))
		rep.Retention = &r
	}
	return rep, nil
}

func contextOf(ctx context.Context, store *memstore.Store, counter *tokens.Counter, id string) ([]session.Message, int, error) {
	s, err := store.Load(ctx, id, false)
	if err != nil {
		return nil, 0, err
	}
	view := pipeline.ContextOf(s)
	return view, counter.Context(view), nil
}

// CheckContext checks a compacted context against the session's full
// history: the leading system messages first, every tool result with its
// call before it and every call with all its results, the summary within
// its budget, the context within the limit.
func CheckContext(all, view []session.Message, viewTokens, limit int, counter *tokens.Counter, maxSummary int) error {
	for i := 0; i < len(all) && all[i].Role == session.RoleSystem; i++ {
		if i >= len(view) || view[i].ID != all[i].ID {
			return fmt.Errorf("pinned system message %d is not in place", i)
		}
	}
	owner, want := pipeline.ToolPairs(all)
	inView := map[string]bool{}
	for _, m := range view {
		inView[m.ID] = true
	}
	got := map[pipeline.ToolCall]int{}
	for _, m := range view {
		if m.IsCompaction {
			if n := counter.Count(m.Compaction.SummaryText); n > maxSummary {
				return fmt.Errorf("summary of %d tokens, over %d", n, maxSummary)
			}
			continue
		}
		if c, ok := owner[m.ID]; ok {
			if !inView[c.MessageID] {
				return fmt.Errorf("tool result %s without its call", m.ToolCallID)
			}
			got[c]++
		}
	}
	for _, m := range view {
		for _, tc := range m.ToolCalls {
			c := pipeline.ToolCall{MessageID: m.ID, CallID: tc.ID}
			if got[c] != want[c] {
				return fmt.Errorf("tool call %s with %d of its %d results", tc.ID, got[c], want[c])
			}
		}
	}
	if viewTokens > limit {
		return fmt.Errorf("context of %d tokens, over the limit %d", viewTokens, limit)
	}
	return nil
}
