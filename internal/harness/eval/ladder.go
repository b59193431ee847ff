package eval

import (
	"context"
	"fmt"
	"io"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// Side is one configuration's totals over a set of conversations.
type Side struct {
	Compactions int `json:"compactions"`
	// NoModel counts compactions that called no model; NoModelShare is
	// their share of the compactions.
	NoModel      int     `json:"compactions_without_model"`
	NoModelShare float64 `json:"share_without_model"`
	LLMCalls     int     `json:"llm_calls"`
	InputTokens  int     `json:"summary_input_tokens"`
	// MeanPrefixKept is the mean prefix_kept_tokens of the compactions;
	// HeadKept the share of their pinned heads kept as the provider's
	// cached prefix (Report.HeadKept over Report.PinnedHead; 0 where no
	// compaction left a pinned head).
	MeanPrefixKept float64 `json:"mean_prefix_kept_tokens"`
	HeadKept       float64 `json:"pinned_head_kept_share,omitempty"`
	PinnedHead     int     `json:"pinned_head_tokens"`
	HeadKeptTokens int     `json:"pinned_head_kept_tokens"`
	TokensSaved    int     `json:"tokens_saved"`
	Failures       int     `json:"failures"`
	// Retention is LoCoMo's fact retention, for conversations with QA.
	Retention *Retention `json:"locomo_retention,omitempty"`
	Share     float64    `json:"locomo_retention_share,omitempty"`
}

func (s *Side) add(r Report) {
	s.Compactions += r.Compactions
	s.NoModel += r.NoModel
	s.LLMCalls += r.LLMCalls
	s.InputTokens += r.InputTokens
	s.MeanPrefixKept += float64(r.PrefixKept) // a sum until finish
	s.PinnedHead += r.PinnedHead
	s.HeadKeptTokens += r.HeadKept
	s.TokensSaved += r.TokensSaved
	s.Failures += r.Failures
	if r.Retention != nil {
		if s.Retention == nil {
			s.Retention = &Retention{}
		}
		*s.Retention = s.Retention.Add(*r.Retention)
	}
}

func (s *Side) finish() {
	if s.Compactions > 0 {
		s.NoModelShare = float64(s.NoModel) / float64(s.Compactions)
		s.MeanPrefixKept /= float64(s.Compactions)
	} else {
		s.MeanPrefixKept = 0
	}
	if s.PinnedHead > 0 {
		s.HeadKept = float64(s.HeadKeptTokens) / float64(s.PinnedHead)
	}
	if s.Retention != nil {
		s.Share = s.Retention.Share()
	}
}

// LadderRow compares the reduction ladder (clear tool results, then
// summarise: the default) with summary only, on the same conversations at
// one limit, in one run.
type LadderRow struct {
	Set         string `json:"set"`
	Limit       int    `json:"context_limit"`
	Sessions    int    `json:"sessions"`
	Tokens      int    `json:"tokens"`
	Ladder      Side   `json:"ladder"`
	SummaryOnly Side   `json:"summary_only"`
	// InputRatio is the ladder's summary-model input tokens over summary
	// only's (the goal: at most 0.5 on agent trajectories).
	InputRatio float64 `json:"input_ratio"`
}

// CompareLadder replays convs (named set) through the runtime loop at each
// limit twice, with cfg's ladder and with summary only, and returns a row
// per limit. progress, when not nil, gets a line per replay.
func CompareLadder(ctx context.Context, set string, convs []transcript.Conversation, counter *tokens.Counter, sum pipeline.Summarizer,
	cfg pipeline.Config, limits []int, progress io.Writer) ([]LadderRow, error) {
	summaryOnly := cfg
	summaryOnly.Reductions = []string{pipeline.StepSummarise}
	ladder := cfg
	if len(ladder.Reductions) == 0 {
		ladder.Reductions = pipeline.DefaultConfig().Reductions
	}
	var rows []LadderRow
	for _, limit := range limits {
		row := LadderRow{Set: set, Limit: limit}
		for _, c := range convs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			row.Sessions++
			for i, conf := range []pipeline.Config{ladder, summaryOnly} {
				rep, err := Replay(ctx, c, counter, sum, conf, limit)
				if err != nil {
					return nil, fmt.Errorf("%s at %d: %w", c.Name, limit, err)
				}
				if i == 0 {
					row.Tokens += rep.Tokens
					row.Ladder.add(rep)
				} else {
					row.SummaryOnly.add(rep)
				}
			}
			if progress != nil {
				fmt.Fprintf(progress, "ladder %s at %d: %d/%d %s\n", set, limit, row.Sessions, len(convs), c.Name)
			}
		}
		row.Ladder.finish()
		row.SummaryOnly.finish()
		if row.SummaryOnly.InputTokens > 0 {
			row.InputRatio = float64(row.Ladder.InputTokens) / float64(row.SummaryOnly.InputTokens)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// CompareLadderSets is CompareLadder on the agent trajectories of convs
// and on the other conversations (LoCoMo, where retention is measured),
// each set that has any: rows for the trajectories first.
func CompareLadderSets(ctx context.Context, convs []transcript.Conversation, counter *tokens.Counter, sum pipeline.Summarizer,
	cfg pipeline.Config, limits []int, progress io.Writer) ([]LadderRow, error) {
	agent, chat := Trajectories(convs)
	var rows []LadderRow
	for _, set := range []struct {
		name  string
		convs []transcript.Conversation
	}{{"agent trajectories", agent}, {"locomo", chat}} {
		if len(set.convs) == 0 {
			continue
		}
		r, err := CompareLadder(ctx, set.name, set.convs, counter, sum, cfg, limits, progress)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// Trajectories splits convs into the agent trajectories (tau-bench,
// SWE-agent, OpenHands) and the other conversations (LoCoMo).
func Trajectories(convs []transcript.Conversation) (agent, chat []transcript.Conversation) {
	for _, c := range convs {
		switch c.Source {
		case "tau-bench", "swe-agent", "openhands":
			agent = append(agent, c)
		default:
			chat = append(chat, c)
		}
	}
	return agent, chat
}
