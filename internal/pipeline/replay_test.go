package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/transcript"
)

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
				all, _, _ := e.store.History(context.Background(), id)
				if err := eval.CheckContext(all, after, e.counter.Context(after), limit, e.counter, cfg.MaxSummaryTokens); err != nil {
					t.Fatalf("%s: %v", id, err)
				}
			}
		}
	}
	t.Logf("outcomes: %v", stats)
	if stats[string(pipeline.OutcomeCompacted)] < len(convs)/4 {
		t.Fatalf("only %d compactions in %d runs", stats[string(pipeline.OutcomeCompacted)], len(convs)*len(limits))
	}
}
