package eval_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
)

// The drift suite on the offline summariser: every planted fact after
// every compaction, no contradiction, three compactions or more in every
// session (issue 45's goals).
func TestDriftSuite(t *testing.T) {
	if raceEnabled {
		t.Skip("18 replays of 140-180 messages: run without -race (make test does)")
	}
	counter, _ := tokens.ForEncoding("o200k_base")
	offline := extractive.New(counter)
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	var all eval.DriftReport
	for _, limit := range []int{3000, 4000} {
		all.Add(driftRun(t, offline, cfg, 6, 1, limit))
	}
	if !all.Met() || all.Scores[eval.DriftPlanStatus].Share() < 1 {
		b, _ := json.MarshalIndent(all, "", " ")
		t.Fatalf("drift goals missed: %s", b)
	}
	// A small budget: the same goals (the working state shows the newest
	// plan items only, so a finished item's status may be left out, never
	// stated pending).
	small := cfg
	small.MaxSummaryTokens = 400
	if tight := driftRun(t, offline, small, 3, 3, 3000); !tight.Met() {
		t.Fatalf("drift goals missed at max_summary_tokens 400: %+v", tight)
	}
	// A model that forgets everything it is given: the ledger alone keeps
	// the decision, the rules, the latest instruction and the plan (the
	// focus is the summariser's to honour).
	forgot := driftRun(t, forgetful{}, cfg, 3, 2, 3000)
	if f := forgot.Scores[eval.DriftFocus]; f.Kept == f.Checks {
		t.Fatalf("a model that forgets kept the focus: the focus check cannot fail: %+v", forgot)
	}
	delete(forgot.Scores, eval.DriftFocus)
	if !forgot.Met() || forgot.Scores[eval.DriftPlanStatus].Share() < 1 {
		t.Fatalf("with a model that forgets, the ledger did not hold: %+v", forgot)
	}
	// The suite can fail: without the ledger, what the summariser alone
	// keeps drifts.
	cfg.LedgerShare = 0
	bare := driftRun(t, offline, cfg, 3, 1, 3000)
	if bare.Met() && bare.Scores[eval.DriftPlanStatus].Share() == 1 {
		t.Fatalf("the suite finds no drift without the ledger: %+v", bare)
	}
	t.Logf("without the ledger: %+v", bare)
}

// driftRun replays the suite's n sessions of seed at limit with sum under
// cfg, and sums their reports.
func driftRun(t *testing.T, sum pipeline.Summarizer, cfg pipeline.Config, n int, seed uint64, limit int) eval.DriftReport {
	t.Helper()
	counter, _ := tokens.ForEncoding("o200k_base")
	var total eval.DriftReport
	for _, c := range eval.DriftCases(n, seed) {
		loop, err := eval.NewMemoryLoop(sum, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := eval.DriftReplay(context.Background(), loop, c, counter, cfg, limit)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(rep)
		t.Logf("%s", b)
		total.Add(rep)
	}
	return total
}
