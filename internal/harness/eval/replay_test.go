package eval_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// merging is the extractive summariser as a model is: it does not reread
// (pipeline.Rereader), so an incremental compaction merges a delta.
type merging struct{ *extractive.Summarizer }

func (m merging) RereadsAll(pipeline.SummaryRequest) bool { return false }

// loCoMo loads the LoCoMo conversations, or skips when the data is absent.
func loCoMo(t *testing.T) []transcript.Conversation {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "..", "shared", "data", "locomo", "locomo8.json")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("skipping: %s is absent", dir)
	}
	convs, err := transcript.LoadLoCoMo(dir)
	if err != nil {
		t.Fatal(err)
	}
	return convs
}

// TestReplayLoCoMo runs the runtime loop over LoCoMo conversations at a
// 2,000-token limit, incremental and from scratch: invariants hold after
// every compaction, and incremental compaction reads far fewer tokens (the
// summariser merges, as a model does: see TestReplayRereads).
func TestReplayLoCoMo(t *testing.T) {
	convs := loCoMo(t)
	counter, _ := tokens.ForEncoding("o200k_base")
	sum := merging{extractive.New(counter)}
	var inc, scratch eval.Report
	for _, c := range convs[:2] {
		for _, incremental := range []bool{true, false} {
			cfg := pipeline.DefaultConfig()
			cfg.EnableIncremental = incremental
			rep, err := eval.Replay(context.Background(), c, counter, sum, cfg, 2000)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Compactions == 0 || rep.Failures != 0 || rep.MaxTokens > 2000 {
				t.Fatalf("%s incremental=%v: %+v", c.Name, incremental, rep)
			}
			t.Logf("%s incremental=%v: %d compactions, %d calls, input %d tokens = %.2f x the %d-token floor, retention %+v",
				c.Name, incremental, rep.Compactions, rep.LLMCalls, rep.InputTokens, rep.CostRatio, rep.Tokens, *rep.Retention)
			if incremental {
				inc.InputTokens += rep.InputTokens
				inc.Tokens += rep.Tokens
			} else {
				scratch.InputTokens += rep.InputTokens
			}
		}
	}
	if inc.InputTokens*3 > scratch.InputTokens {
		t.Fatalf("incremental read %d tokens, from scratch %d: want at least 3x less", inc.InputTokens, scratch.InputTokens)
	}
}

// TestReplayRereads: the offline summariser rereads (each compaction
// summarises everything again from the originals), and keeps more LoCoMo
// answers than merging into the summary in force, over a full replay.
func TestReplayRereads(t *testing.T) {
	if raceEnabled {
		t.Skip("a full replay, rereading: run without -race (make test does)")
	}
	convs := loCoMo(t)
	counter, _ := tokens.ForEncoding("o200k_base")
	var merged, reread eval.Retention
	for _, c := range convs[:2] {
		for _, sum := range []pipeline.Summarizer{extractive.New(counter), merging{extractive.New(counter)}} {
			rep, err := eval.Replay(context.Background(), c, counter, sum, pipeline.DefaultConfig(), 2000)
			if err != nil || rep.Failures != 0 || rep.MaxTokens > 2000 {
				t.Fatalf("%s: %v %+v", c.Name, err, rep)
			}
			if _, ok := sum.(merging); ok {
				merged = merged.Add(*rep.Retention)
			} else {
				reread = reread.Add(*rep.Retention)
			}
		}
	}
	t.Logf("retention: rereading %+v, merging %+v", reread, merged)
	if reread.Share() <= merged.Share() {
		t.Fatalf("rereading kept %.3f, merging %.3f", reread.Share(), merged.Share())
	}
}

// TestReplayTauBenchReusedIDs replays the tau-bench runs whose tool-call ids
// repeat (task 9 trial 2 calls update_reservation_flights twice with one id
// while a call is pending): every compaction keeps its invariants.
func TestReplayTauBenchReusedIDs(t *testing.T) {
	path := filepath.Join("..", "..", "..", "..", "shared", "data", "agent_trajectories", "tau-bench", "gpt-4o-airline-tasks0-39.json")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("skipping: %s is absent", path)
	}
	convs, err := transcript.LoadTauBench(path)
	if err != nil {
		t.Fatal(err)
	}
	counter, _ := tokens.ForEncoding("o200k_base")
	n := 0
	for _, c := range convs {
		if c.Name != "tau-bench/task9-trial2" && c.Name != "tau-bench/task2-trial1" && c.Name != "tau-bench/task0-trial0" {
			continue
		}
		n++
		rep, err := eval.Replay(context.Background(), c, counter, extractive.New(counter), pipeline.DefaultConfig(), 4000)
		if err != nil {
			t.Fatal(err)
		}
		// Replay fails on a broken invariant; a refused hopeless compaction
		// (insufficient_progress) is counted, not an error.
		if rep.Compactions == 0 {
			t.Fatalf("%s: %+v", c.Name, rep)
		}
	}
	if n != 3 {
		t.Fatalf("found %d of the 3 runs", n)
	}
}

// A 1,255-token pinned policy and a 1,000-token summary leave a 4,000-token
// window almost no headroom: the tail keeps half of the room they leave, so
// each compaction cuts enough and the session keeps compacting as it grows
// (it used to fail insufficient_progress three times and open its breaker).
func TestReplayPinnedPromptLeavesRoom(t *testing.T) {
	msgs, err := transcript.Parse(demo.Trajectory)
	if err != nil {
		t.Fatal(err)
	}
	counter, _ := tokens.ForEncoding("o200k_base")
	rep, err := eval.Replay(context.Background(), transcript.Conversation{Name: "tau-bench task 2", Messages: msgs}, counter,
		extractive.New(counter), pipeline.DefaultConfig(), 4000)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failures != 0 || rep.CircuitOpen || rep.Compactions < 2 || rep.MaxTokens > 4000 {
		t.Fatalf("%+v", rep)
	}
}
