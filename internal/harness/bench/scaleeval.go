package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// EvalRow compares `compactor eval` replayed through the service (an
// embedded server, sessions in the store, requests and results as
// CloudEvents) with the same replay in process.
type EvalRow struct {
	Sessions int `json:"sessions"`
	Limit    int `json:"context_limit"`
	// Seconds of the replays alone (the service's start is not counted).
	InProcessS float64 `json:"in_process_s"`
	ServiceS   float64 `json:"service_s"`
	Ratio      float64 `json:"ratio"`
	// Compactions of each: the same replay asks for the same ones.
	InProcessCompactions int `json:"in_process_compactions"`
	ServiceCompactions   int `json:"service_compactions"`
}

// evalRun replays convs at limit, incrementally, in process and then
// through the service, and times both.
func evalRun(ctx context.Context, convs []transcript.Conversation, limit int) (*EvalRow, error) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	cfg := pipeline.DefaultConfig()
	cfg.EnableIncremental = true
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	row := &EvalRow{Sessions: len(convs), Limit: limit}
	sum := extractive.New(counter)
	start := time.Now()
	for _, c := range convs {
		rep, err := eval.Replay(ctx, c, counter, sum, cfg, limit)
		if err != nil {
			return nil, fmt.Errorf("in process: %s: %w", c.Name, err)
		}
		row.InProcessCompactions += rep.Compactions
	}
	row.InProcessS = time.Since(start).Seconds()
	loop, err := NewServiceLoop(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer loop.Close()
	start = time.Now()
	for _, c := range convs {
		rep, err := eval.ReplayOn(ctx, loop, c, counter, cfg, limit)
		if err != nil {
			return nil, fmt.Errorf("through the service: %s: %w", c.Name, err)
		}
		row.ServiceCompactions += rep.Compactions
	}
	row.ServiceS = time.Since(start).Seconds()
	row.Ratio = row.ServiceS / row.InProcessS
	return row, nil
}
