package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// CostRow is one LoCoMo conversation replayed at one limit: summary-model
// input tokens, incremental and from scratch, against the floor of reading
// each of the conversation's tokens once.
type CostRow struct {
	Conversation      string  `json:"conversation"`
	Messages          int     `json:"messages"`
	Tokens            int     `json:"tokens"` // the floor
	Limit             int     `json:"context_limit"`
	IncrementalInput  int     `json:"incremental_input_tokens"`
	ScratchInput      int     `json:"scratch_input_tokens"`
	IncrementalRatio  float64 `json:"incremental_over_floor"`
	ScratchRatio      float64 `json:"scratch_over_floor"`
	IncrementalCompac int     `json:"incremental_compactions"`
	ScratchCompac     int     `json:"scratch_compactions"`
	IncrementalKept   float64 `json:"incremental_retention"`
	ScratchKept       float64 `json:"scratch_retention"`
	// Retention counts, to add up: eligible answers, and those kept.
	Eligible        int `json:"eligible"`
	IncrementalHits int `json:"incremental_kept"`
	ScratchHits     int `json:"scratch_kept"`
}

// promptCounter makes the summariser report the tokens a model would be
// charged for each call: its instruction and prompt as rendered, counted
// with tiktoken (the pipeline's own figure is a conservative estimate).
type promptCounter struct {
	next    pipeline.Summarizer
	counter *tokens.Counter
	sys     sync.Map
}

func (p *promptCounter) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	res, err := p.next.Summarize(ctx, r)
	if err == nil {
		n, ok := p.sys.Load(r.System)
		if !ok {
			n = p.counter.Count(r.System)
			p.sys.Store(r.System, n)
		}
		// as OpenAI counts a two-message request: 4 per message, 3 priming
		res.InputTokens = n.(int) + p.counter.Count(r.Prompt) + 11
	}
	return res, err
}

// modelCost replays every LoCoMo conversation of data through the runtime
// loop (eval.Replay: messages arrive one by one, a compaction whenever the
// context is over the limit, invariants checked after each).
func modelCost(ctx context.Context, data string, limits []int, progress io.Writer) ([]CostRow, string, error) {
	path := filepath.Join(data, "locomo", "locomo8.json")
	if data == "" {
		return nil, "skipped: no data folder given (--data)", nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Sprintf("skipped: %s is absent", path), nil
	}
	convs, err := transcript.LoadLoCoMo(path)
	if err != nil {
		return nil, "", err
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, "", err
	}
	sum := &promptCounter{next: extractive.New(counter), counter: counter}
	var rows []CostRow
	for _, limit := range limits {
		for _, c := range convs {
			row := CostRow{Conversation: c.Name, Messages: len(c.Messages), Limit: limit}
			for _, incremental := range []bool{true, false} {
				cfg := pipeline.DefaultConfig()
				cfg.EnableIncremental = incremental
				rep, err := eval.Replay(ctx, c, counter, sum, cfg, limit)
				if err != nil {
					return nil, "", fmt.Errorf("%s at %d: %w", c.Name, limit, err)
				}
				row.Tokens = rep.Tokens
				var ret eval.Retention
				if rep.Retention != nil {
					ret = *rep.Retention
				}
				if incremental {
					row.IncrementalInput, row.IncrementalRatio, row.IncrementalCompac, row.IncrementalKept = rep.InputTokens, rep.CostRatio, rep.Compactions, ret.Share()
					row.IncrementalHits, row.Eligible = ret.Kept, ret.Eligible
				} else {
					row.ScratchInput, row.ScratchRatio, row.ScratchCompac, row.ScratchKept = rep.InputTokens, rep.CostRatio, rep.Compactions, ret.Share()
					row.ScratchHits = ret.Kept
				}
			}
			fmt.Fprintf(progress, "model cost %s at %d: incremental %.2f×, from scratch %.2f× the floor\n", c.Name, limit, row.IncrementalRatio, row.ScratchRatio)
			rows = append(rows, row)
		}
	}
	return rows, "", nil
}

// LadderLimits are the context limits of the ladder comparison.
var LadderLimits = []int{8000, 32000}

// conversations loads every conversation of the data folder; note says
// why there are none (no folder given, nothing in it).
func conversations(data string) (convs []transcript.Conversation, note string, err error) {
	if data == "" {
		return nil, "skipped: no data folder given (--data)", nil
	}
	if convs, err = transcript.LoadDataDir(data); err != nil {
		return nil, "", err
	}
	if len(convs) == 0 {
		return nil, fmt.Sprintf("skipped: no conversations under %s", data), nil
	}
	return convs, "", nil
}

// prepared runs ComparePrepared on every conversation of the data folder.
func prepared(ctx context.Context, data string, opt PreparedOptions, progress io.Writer) (*PreparedComparison, string, error) {
	convs, note, err := conversations(data)
	if len(convs) == 0 {
		return nil, note, err
	}
	opt.Progress = progress
	cmp, err := ComparePrepared(ctx, convs, pipeline.DefaultConfig(), opt)
	return cmp, "", err
}

// LongLimits are the windows the long agent runs are replayed at: where
// agents work, tens of thousands of tokens deep.
var LongLimits = []int{32000, 64000}

// LongPace is the pace the long agent runs are replayed at unless the
// options say otherwise: a real agent loop's (the goals of issue 26 are
// set there; at 0.25x a 32k session grows past its limit before a 2 s
// preparation is done).
const LongPace = 1.0

// WindowLimit is the window the bundled sets are replayed at, at
// LongPace, for issue 26's goals (section 8 of make bench): the smallest
// where their chats compact more than once.
const WindowLimit = 8000

// longPrepared runs ComparePrepared on the long agent runs of the data
// folder (agent_trajectories/long), at each of LongLimits, at LongPace
// unless opt sets a pace.
func longPrepared(ctx context.Context, data string, opt PreparedOptions, progress io.Writer) ([]*PreparedComparison, string, error) {
	if data == "" {
		return nil, "skipped: no data folder given (--data)", nil
	}
	dir := filepath.Join(data, "agent_trajectories", "long")
	convs, err := transcript.LoadLongDir(dir)
	if err != nil {
		return nil, "", err
	}
	if len(convs) == 0 {
		return nil, fmt.Sprintf("skipped: no long agent runs under %s", dir), nil
	}
	opt.Progress = progress
	// One window after the other, each with its two modes at once (a
	// replay at a real pace mostly waits; both windows at once, four
	// replays, made a 64k request wait 72 ms where alone it waits 20-30).
	var out []*PreparedComparison
	for _, limit := range LongLimits {
		o := opt
		o.Limit, o.Together = limit, true
		if o.Pace == 0 {
			o.Pace = LongPace
		}
		cmp, err := ComparePrepared(ctx, convs, pipeline.DefaultConfig(), o)
		if err != nil {
			return nil, "", fmt.Errorf("at %d tokens: %w", limit, err)
		}
		out = append(out, cmp)
	}
	return out, "", nil
}

// ladder replays the agent trajectories of data (tau-bench, SWE-agent,
// OpenHands) and LoCoMo through the runtime loop with the reduction ladder
// and with summary only, at LadderLimits, with the token limit as the only
// trigger (the message count is a separate policy that clearing cannot
// serve).
func ladder(ctx context.Context, data string, progress io.Writer) ([]eval.LadderRow, string, error) {
	convs, note, err := conversations(data)
	if len(convs) == 0 {
		return nil, note, err
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, "", err
	}
	sum := &promptCounter{next: extractive.New(counter), counter: counter}
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	rows, err := eval.CompareLadderSets(ctx, convs, counter, sum, cfg, LadderLimits, nil)
	if err != nil {
		return nil, "", err
	}
	for _, row := range rows {
		fmt.Fprintf(progress, "ladder %s at %d: input %.2f× summary only, %d of %d compactions without a model call\n",
			row.Set, row.Limit, row.InputRatio, row.Ladder.NoModel, row.Ladder.Compactions)
	}
	return rows, "", nil
}
