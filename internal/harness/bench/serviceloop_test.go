package bench

import (
	"context"
	"testing"

	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// The runtime loop over the bundled tau-bench run gives the same report
// through the service (KV, CloudEvents, the durable consumer) as in
// process: the same compactions, model calls and tokens, every invariant
// checked after every compaction.
func TestServiceLoopMatchesMemoryLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and the service")
	}
	msgs, err := transcript.Parse(demo.Trajectory)
	if err != nil {
		t.Fatal(err)
	}
	conv := transcript.Conversation{Name: "tau-bench task 2", Source: "tau-bench", Messages: msgs}
	counter, _ := tokens.ForEncoding("o200k_base")
	ctx := context.Background()
	for _, incremental := range []bool{true, false} {
		cfg := pipeline.DefaultConfig()
		cfg.EnableIncremental = incremental
		mem, err := eval.Replay(ctx, conv, counter, extractive.New(counter), cfg, 4000)
		if err != nil {
			t.Fatal(err)
		}
		loop, err := NewServiceLoop(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := eval.ReplayOn(ctx, loop, conv, counter, cfg, 4000)
		loop.Close()
		if err != nil {
			t.Fatal(err)
		}
		if mem.Compactions == 0 || svc.Compactions != mem.Compactions || svc.LLMCalls != mem.LLMCalls || svc.InputTokens != mem.InputTokens ||
			svc.FinalTokens != mem.FinalTokens || svc.Failures != mem.Failures {
			t.Fatalf("incremental=%v: service %+v, in process %+v", incremental, svc, mem)
		}
	}
}
