package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/tokens"
)

// driftLine is eval drift's line for a limit (or all of them): the
// suite's scores, its contradictions and whether its goals are met.
type driftLine struct {
	eval.DriftReport
	Shares map[string]float64 `json:"shares"`
	Met    bool               `json:"goals_met"`
}

func newDriftLine(r eval.DriftReport) driftLine {
	l := driftLine{DriftReport: r, Shares: map[string]float64{}, Met: r.Met()}
	for k, t := range r.Scores {
		l.Shares[k] = t.Share()
	}
	return l
}

// driftLimits are the windows the suite compacts at unless --limits says:
// small enough that every session is summarised many times over.
const driftLimits = "3000,4000"

// runDrift is eval drift: the drift suite's sessions at each limit, with
// the offline summariser or --provider's model; a line per case with
// --per-file, a line per limit and one for all. Missing a goal is a
// failure (exit 1).
func (f *evalFlags) runDrift(ctx context.Context, enc *json.Encoder, counter *tokens.Counter, lims []int, pw io.Writer) error {
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens, cfg.MaxMessages, cfg.SummaryModel = f.maxSummary, 0, f.summaryModel
	var sum pipeline.Summarizer = extractive.New(counter)
	if f.provider != "extractive" {
		r, err := router.FromSettings(router.Settings{Provider: f.provider, BaseURL: f.baseURL, Extractive: extractive.New(counter)})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		sum, cfg.SummaryProvider = r, f.provider
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.cases < 1 {
		return fmt.Errorf("%w: --cases must be at least 1", errUsage)
	}
	cases := eval.DriftCases(f.cases, f.seed)
	var all eval.DriftReport
	for _, limit := range lims {
		var total eval.DriftReport
		for _, c := range cases {
			loop, err := eval.NewMemoryLoop(sum, cfg)
			if err != nil {
				return err
			}
			rep, err := eval.DriftReplay(ctx, loop, c, counter, cfg, limit)
			if err != nil {
				return err
			}
			if pw != nil {
				fmt.Fprintf(pw, "drift %s at %d: %d compactions\n", c.Conv.Name, limit, rep.Compactions)
			}
			if f.perFile {
				if err := enc.Encode(newDriftLine(rep)); err != nil {
					return err
				}
			}
			total.Add(rep)
		}
		total.Name, total.Limit = "all", limit
		if err := enc.Encode(newDriftLine(total)); err != nil {
			return err
		}
		all.Add(total)
	}
	all.Name = "all"
	if err := enc.Encode(newDriftLine(all)); err != nil {
		return err
	}
	if !all.Met() {
		return fmt.Errorf("%w: drift goals missed", errFailed)
	}
	return nil
}
