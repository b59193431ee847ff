package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
)

// checkInvariants asserts what every compacted context must satisfy.
func checkInvariants(t testing.TB, name string, before, after []session.Message, limit, maxSummary int, e *env) {
	t.Helper()
	// pinned leading system messages of the original are still first
	i := 0
	for i < len(before) && before[i].Role == session.RoleSystem && !before[i].IsCompaction {
		if i >= len(after) || after[i].ID != before[i].ID {
			t.Fatalf("%s: pinned system message %d lost", name, i)
		}
		i++
	}
	calls := map[string]bool{}
	for _, m := range after {
		for _, tc := range m.ToolCalls {
			calls[tc.ID] = true
		}
	}
	origCalls := map[string]bool{}
	for _, m := range before {
		for _, tc := range m.ToolCalls {
			origCalls[tc.ID] = true
		}
	}
	for _, m := range after {
		if m.Role == session.RoleTool && origCalls[m.ToolCallID] && !calls[m.ToolCallID] {
			t.Fatalf("%s: tool result %s kept without its call", name, m.ToolCallID)
		}
	}
	if n := e.counter.Context(after); n > limit {
		t.Fatalf("%s: context has %d tokens, over limit %d", name, n, limit)
	}
	for _, m := range after {
		if m.IsCompaction {
			if n := e.counter.Count(m.Compaction.SummaryText); n > maxSummary {
				t.Fatalf("%s: summary has %d tokens, over %d", name, n, maxSummary)
			}
		}
	}
}

// TestReplayRealData compacts every conversation and trajectory of
// ../shared/data under several context limits, checking the invariants.
func TestReplayRealData(t *testing.T) {
	dir := needData(t)
	convs, err := transcript.LoadDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(convs) < 10 {
		t.Fatalf("loaded only %d conversations", len(convs))
	}
	limits := []int{4000, 8000, 16000}
	if testing.Short() || raceEnabled { // a sample of each dataset, one limit
		var sample []transcript.Conversation
		for i, c := range convs {
			if c.Source != "tau-bench" || i%16 == 0 {
				sample = append(sample, c)
			}
		}
		convs, limits = sample, []int{4000}
	}
	stats := map[string]int{}
	for _, limit := range limits {
		cfg := pipeline.DefaultConfig()
		e := newEnv(t, nil, cfg)
		for ci, c := range convs {
			id := fmt.Sprintf("%d-%s", limit, c.Name)
			e.importSession(t, id, limit, c.Messages)
			before := e.context(t, id)
			res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprint(ci), SessionID: id, Trigger: pipeline.TriggerOverBudget})
			if err != nil {
				stats[string(res.Reason)]++
				// A session whose pinned prompt alone fills the window may be
				// refused; nothing else may fail.
				if !errors.Is(err, pipeline.ErrInsufficientProgress) {
					t.Errorf("%s @%d: %v", c.Name, limit, err)
				}
				continue
			}
			stats[string(res.Outcome)]++
			after := e.context(t, id)
			if res.Outcome == pipeline.OutcomeCompacted {
				checkInvariants(t, id, before, after, limit, cfg.MaxSummaryTokens, e)
			}
		}
	}
	t.Logf("outcomes: %v", stats)
	if stats[string(pipeline.OutcomeCompacted)] < len(convs)/4 {
		t.Fatalf("only %d compactions in %d runs", stats[string(pipeline.OutcomeCompacted)], len(convs)*len(limits))
	}
}
