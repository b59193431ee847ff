package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/bench"
	"github.com/compactor/compactor/internal/eval"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// evalSummary is the overall line of `compactor eval`.
type evalSummary struct {
	Limit       int     `json:"context_limit"`
	Incremental bool    `json:"incremental"`
	Service     bool    `json:"through_service,omitempty"`
	Sessions    int     `json:"sessions"`
	Compactions int     `json:"compactions"`
	Failures    int     `json:"failures"`
	LLMCalls    int     `json:"llm_calls"`
	Tokens      int     `json:"tokens"`
	InputTokens int     `json:"summary_input_tokens"`
	CostRatio   float64 `json:"input_over_floor"`
	TokensSaved int     `json:"tokens_saved"`
	// PinnedHeadKept is the share of the compacted contexts' pinned heads
	// kept as the provider's cached prefix (omitted where none had one).
	PinnedHeadKept float64         `json:"pinned_head_kept_share,omitempty"`
	Retention      *eval.Retention `json:"locomo_retention,omitempty"`
	Share          float64         `json:"locomo_retention_share,omitempty"`
	pinnedHead     int
	headKept       int
}

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseEvalFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	lims, modes, err := f.limitsAndModes()
	if err != nil {
		return err
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	var pw io.Writer
	if f.progress {
		pw = stderr
	}
	if f.drift {
		return f.runDrift(ctx, enc, counter, lims, pw)
	}
	if f.recall {
		return f.runRecall(ctx, enc, lims, pw)
	}
	convs, err := f.conversations()
	if err != nil {
		return err
	}
	sum := extractive.New(counter)
	switch {
	case f.probes:
		return f.runProbes(ctx, enc, convs, counter, sum, lims, pw)
	case f.comparePrepared:
		return f.runComparePrepared(ctx, enc, convs, lims, pw)
	case f.compare:
		cfg := pipeline.DefaultConfig()
		cfg.MaxSummaryTokens, cfg.MaxMessages = f.maxSummary, f.maxMessages
		rows, err := eval.CompareLadderSets(ctx, convs, counter, sum, cfg, lims, pw)
		if err != nil {
			return err
		}
		return encodeAll(enc, rows)
	}
	for _, limit := range lims {
		for _, incremental := range modes {
			if err := f.replayAll(ctx, enc, convs, counter, sum, limit, incremental, stderr); err != nil {
				return err
			}
		}
	}
	return nil
}

// evalFlags are eval's flags.
type evalFlags struct {
	data, limits, mode, trace, speakers, provider, baseURL, summaryModel  string
	shape                                                                 string
	maxSummary, maxMessages                                               int
	perFile, compare, progress, comparePrepared, together, probesPrepared bool
	probes, long, service, drift, recall, quick                           bool
	cases, queries                                                        int
	out                                                                   string
	seed                                                                  uint64
	modelDelay                                                            time.Duration
	prepareAt, pace                                                       float64
}

func parseEvalFlags(args []string, stdout, stderr io.Writer) (*evalFlags, error) {
	f := &evalFlags{}
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.StringVar(&f.data, "data", "../shared/data", "data `DIR` laid out as shared/data (locomo/, agent_trajectories/)")
	fs.StringVar(&f.limits, "limits", "2000,4000", "comma-separated context `LIMITS` to replay at")
	fs.StringVar(&f.mode, "mode", "both", "`MODE`: incremental, scratch or both")
	fs.IntVar(&f.maxSummary, "max-summary-tokens", pipeline.DefaultConfig().MaxSummaryTokens, "the compaction message's budget in tokens (preamble, ledger and summary)")
	fs.BoolVar(&f.perFile, "per-file", false, "print a report line per conversation too")
	fs.IntVar(&f.maxMessages, "max-messages", pipeline.DefaultConfig().MaxMessages, "compact when the context has more messages (0: only the token limit; with --long, 0 unless set: an agent at a real window compacts at its limit)")
	fs.BoolVar(&f.compare, "compare-ladder", false, "compare the reduction ladder (clear tool results, then summarise) with summary only, in one run: the agent trajectories and LoCoMo, a line per set and limit")
	fs.BoolVar(&f.progress, "progress", isTerminal(stderr), "show progress on stderr (default: when stderr is a terminal)")
	fs.BoolVar(&f.comparePrepared, "compare-prepared", false, "compare blocking and prepared compactions through the service, in one run: every conversation at once, paced, with an OpenAI-compatible stand-in model whose every call takes --model-delay (one line per mode, then the comparison); --limits takes one limit")
	fs.DurationVar(&f.modelDelay, "model-delay", 2*time.Second, "with --compare-prepared: how long every summary call takes")
	fs.Float64Var(&f.prepareAt, "prepare-at", pipeline.DefaultConfig().PrepareAt, "with --compare-prepared: the prepared mode's prepare_at")
	fs.StringVar(&f.trace, "trace", "", "with --compare-prepared: write a JSON line per request to `FILE` (mode, session, message, strategy, tokens before and after, summary input): why one mode spent more than the other")
	fs.Float64Var(&f.pace, "pace", 0.25, "with --compare-prepared: the messages' pacing, as a share of a real agent loop's (1: real time; smaller is faster and leaves preparations less time)")
	fs.StringVar(&f.shape, "shape", "", "with --compare-prepared: vary the conversations and their pace: recorded, big-observations (every sixth tool output grown to 30% of the window), bursts (12 messages at a tenth of their pace after each long idle) or slow (steps five times slower)")
	fs.BoolVar(&f.together, "together", false, "with --compare-prepared: run the two modes at the same time (half the time; they share the CPU)")
	fs.StringVar(&f.speakers, "speakers", "name", "how LoCoMo's chats are stored: `FORM` name (the speaker in each message's name), prefix (\"Speaker: text\" in the content, no name) or anonymous (neither)")
	fs.BoolVar(&f.probesPrepared, "prepared", false, "with --probes: the prepared path (each append past prepare_at prepares the next compaction, which the request commits), probes checked the same")
	fs.BoolVar(&f.probes, "probes", false, "check probes after every compaction of the replay (files touched, errors, commands, decisions, the user's instructions, plan items and their status, LoCoMo answers) and report them per category and source; LoCoMo beside its truncation baselines, per conversation")
	fs.StringVar(&f.provider, "provider", "extractive", "with --probes: the summary `PROVIDER` (extractive, openai or anthropic; keys from OPENAI_API_KEY / ANTHROPIC_API_KEY)")
	fs.StringVar(&f.baseURL, "base-url", "", "with --probes: the provider's endpoint `URL`")
	fs.StringVar(&f.summaryModel, "summary-model", "", "with --probes: the summary `MODEL` (default: gpt-4o, the replayed sessions' model)")
	fs.BoolVar(&f.drift, "drift", false, "run the drift suite: made agent sessions with a locked decision, a forbidden action, an instruction a later one supersedes, a tracked plan finished item by item and a focus text, compacted incrementally many times (--limits default "+driftLimits+"); scores presence after every compaction and contradictions; exit 1 when a goal is missed")
	fs.IntVar(&f.cases, "cases", 6, "with --drift: how many sessions to make")
	fs.Uint64Var(&f.seed, "seed", 1, "with --drift: the seed the sessions are made from")
	fs.BoolVar(&f.recall, "recall", false, "measure recall: replay every conversation (LoCoMo and the agent runs at --limits' first, default 4000; the long runs at 32000) and search, with no model, for what the final context summarised (LoCoMo evidence by its question, found at k = 1, 5, 10; agent files, commands and errors at 5), then time searches through compactor.session.search on sessions of 1,000 and 10,000 messages; exit 1 when a goal of issue 46 is missed")
	fs.StringVar(&f.out, "out", "", "with --recall: also write the run as Markdown to `FILE` (docs/RECALL.md)")
	fs.IntVar(&f.queries, "queries", 200, "with --recall: searches timed at each session length")
	fs.BoolVar(&f.quick, "quick", false, "with --recall: shorter latency runs (500 and 2,000 messages, 40 searches)")
	fs.BoolVar(&f.long, "long", false, "replay the long agent runs instead (DIR/agent_trajectories/long: mini-swe-agent and OpenHands, 75k-290k tokens each)")
	fs.BoolVar(&f.service, "service", false, "replay through the service: an embedded nats-server, sessions in KV, requests and results as CloudEvents (slower; the same figures)")
	pos, err := parseFlags(fs, args, stdout, "eval [--data DIR] [--long] [--limits 2000,4000] [--mode both] [--service] [--per-file]")
	if err != nil {
		return nil, err
	}
	if err := noArgs(pos); err != nil {
		return nil, err
	}
	if f.drift && !flagSet(fs, "limits") {
		f.limits = driftLimits
	}
	if f.recall && !flagSet(fs, "limits") {
		f.limits = "4000"
	}
	if f.long && !flagSet(fs, "max-messages") {
		f.maxMessages = 0
	}
	return f, nil
}

// limitsAndModes reads --limits and --mode.
func (f *evalFlags) limitsAndModes() ([]int, []bool, error) {
	var lims []int
	for _, s := range strings.Split(f.limits, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("%w: --limits: %q is not a positive number", errUsage, s)
		}
		lims = append(lims, n)
	}
	modes := map[string][]bool{"incremental": {true}, "scratch": {false}, "both": {true, false}}[f.mode]
	if modes == nil {
		return nil, nil, fmt.Errorf("%w: --mode must be incremental, scratch or both", errUsage)
	}
	return lims, modes, nil
}

// conversations loads the data set --data and --long name, with
// --speakers' form of LoCoMo's chats.
func (f *evalFlags) conversations() ([]transcript.Conversation, error) {
	load := transcript.LoadDataDir
	if f.long {
		load = func(dir string) ([]transcript.Conversation, error) {
			return transcript.LoadLongDir(filepath.Join(dir, "agent_trajectories", "long"))
		}
	}
	convs, err := load(f.data)
	if err != nil {
		return nil, err
	}
	if convs, err = transcript.WithSpeakers(convs, f.speakers); err != nil {
		return nil, fmt.Errorf("%w: --speakers: %v", errUsage, err)
	}
	if len(convs) == 0 {
		return nil, fmt.Errorf("no conversations found under %s", f.data)
	}
	return convs, nil
}

// runProbes is eval --probes.
func (f *evalFlags) runProbes(ctx context.Context, enc *json.Encoder, convs []transcript.Conversation, counter *tokens.Counter,
	sum *extractive.Summarizer, lims []int, pw io.Writer) error {
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens, cfg.MaxMessages, cfg.SummaryModel = f.maxSummary, f.maxMessages, f.summaryModel
	var ps pipeline.Summarizer = sum
	if f.provider != "extractive" {
		r, err := router.FromSettings(router.Settings{Provider: f.provider, BaseURL: f.baseURL, Extractive: sum})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		ps, cfg.SummaryProvider = r, f.provider
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return evalProbes(ctx, enc, convs, counter, ps, cfg, lims, f.perFile, f.probesPrepared, pw)
}

// runComparePrepared is eval --compare-prepared.
func (f *evalFlags) runComparePrepared(ctx context.Context, enc *json.Encoder, convs []transcript.Conversation, lims []int, pw io.Writer) error {
	if len(lims) != 1 {
		return fmt.Errorf("%w: --compare-prepared takes one limit (--limits 4000)", errUsage)
	}
	if f.modelDelay <= 0 || f.pace <= 0 {
		return fmt.Errorf("%w: --model-delay and --pace must be positive", errUsage)
	}
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens, cfg.PrepareAt = f.maxSummary, f.prepareAt
	if err := cfg.Validate(); err != nil || f.prepareAt == 0 {
		return fmt.Errorf("%w: --prepare-at must be in (0, 1)", errUsage)
	}
	opt := bench.PreparedOptions{Limit: lims[0], ModelDelay: f.modelDelay, Pace: f.pace, Progress: pw, Together: f.together}
	if f.shape != "" {
		s, err := bench.ShapeNamed(f.shape)
		if err != nil {
			return fmt.Errorf("%w: --shape: %v", errUsage, err)
		}
		opt.Shape = s
	}
	if f.trace != "" {
		t, err := os.Create(f.trace)
		if err != nil {
			return err
		}
		defer t.Close()
		opt.Trace = t
	}
	cmp, err := bench.ComparePrepared(ctx, convs, cfg, opt)
	if err != nil {
		return err
	}
	return encodeAll(enc, []any{cmp.Blocking, cmp.Prepared, cmp})
}

// replayAll replays every conversation at limit, incremental or from
// scratch (in process, or through the service with --service), and
// prints each report with --per-file, then the overall line.
func (f *evalFlags) replayAll(ctx context.Context, enc *json.Encoder, convs []transcript.Conversation, counter *tokens.Counter,
	sum *extractive.Summarizer, limit int, incremental bool, stderr io.Writer) error {
	cfg := pipeline.DefaultConfig()
	cfg.EnableIncremental, cfg.MaxSummaryTokens, cfg.MaxMessages = incremental, f.maxSummary, f.maxMessages
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	total := evalSummary{Limit: limit, Incremental: incremental, Service: f.service}
	var loop eval.Loop
	if f.service {
		sl, err := bench.NewServiceLoop(ctx, cfg)
		if err != nil {
			return err
		}
		defer sl.Close()
		loop = sl
	}
	mode := "from scratch"
	if incremental {
		mode = "incremental"
	}
	for i, c := range convs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.progress {
			fmt.Fprintf(stderr, "\r\033[Keval: limit %d, %s: %d/%d %s", limit, mode, i+1, len(convs), c.Name)
		}
		var rep eval.Report
		var err error
		if loop != nil {
			rep, err = eval.ReplayOn(ctx, loop, c, counter, cfg, limit)
		} else {
			rep, err = eval.Replay(ctx, c, counter, sum, cfg, limit)
		}
		if err != nil {
			return err
		}
		if f.perFile {
			if err := enc.Encode(rep); err != nil {
				return err
			}
		}
		total.add(rep)
	}
	if f.progress {
		fmt.Fprint(stderr, "\r\033[K")
	}
	total.finish()
	return enc.Encode(total)
}

// add counts one conversation's report in the overall line.
func (t *evalSummary) add(rep eval.Report) {
	t.Sessions++
	t.Compactions += rep.Compactions
	t.Failures += rep.Failures
	t.LLMCalls += rep.LLMCalls
	t.Tokens += rep.Tokens
	t.InputTokens += rep.InputTokens
	t.TokensSaved += rep.TokensSaved
	t.pinnedHead += rep.PinnedHead
	t.headKept += rep.HeadKept
	if rep.Retention != nil {
		if t.Retention == nil {
			t.Retention = &eval.Retention{}
		}
		*t.Retention = t.Retention.Add(*rep.Retention)
	}
}

// finish works out the overall line's ratios.
func (t *evalSummary) finish() {
	if t.Tokens > 0 {
		t.CostRatio = float64(t.InputTokens) / float64(t.Tokens)
	}
	if t.Retention != nil {
		t.Share = t.Retention.Share()
	}
	if t.pinnedHead > 0 {
		t.PinnedHeadKept = float64(t.headKept) / float64(t.pinnedHead)
	}
}

// encodeAll writes each value as a JSON line.
func encodeAll[T any](enc *json.Encoder, vs []T) error {
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (progress lines are for
// people, not for logs).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// probeLine is a line of `compactor eval --probes`: the probes of one
// source (or of all) at one limit, each category's kept share.
type probeLine struct {
	eval.ProbeReport
	Shares map[string]float64 `json:"shares"`
	// LoCoMo: the better truncation baseline's share and the summary's
	// over it.
	Baseline float64 `json:"locomo_baseline_share,omitempty"`
	OverBest float64 `json:"locomo_over_baseline,omitempty"`
}

func newProbeLine(r eval.ProbeReport) probeLine {
	l := probeLine{ProbeReport: r, Shares: map[string]float64{}}
	for k, t := range r.Scores {
		if t.Checks > 0 {
			l.Shares[k] = t.Share()
		}
	}
	if t, ok := r.Scores[eval.ProbeLoCoMo]; ok && t.Checks > 0 {
		l.Baseline = max(r.First.Share(), r.Last.Share())
		if r.First.Checks == 0 {
			l.Baseline = 0
		}
		if l.Baseline > 0 {
			l.OverBest = t.Share() / l.Baseline
		}
	}
	return l
}

// evalProbes replays every conversation at each limit with its probes,
// in process, and writes a line per LoCoMo conversation (with
// --per-file, per conversation), per source and for all.
func evalProbes(ctx context.Context, enc *json.Encoder, convs []transcript.Conversation, counter *tokens.Counter, sum pipeline.Summarizer,
	cfg pipeline.Config, lims []int, perFile, prepared bool, progress io.Writer) error {
	for _, limit := range lims {
		var reps []eval.ProbeReport
		for i, c := range convs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if progress != nil {
				fmt.Fprintf(progress, "\r\033[Keval --probes: limit %d: %d/%d %s", limit, i+1, len(convs), c.Name)
			}
			newLoop := eval.NewMemoryLoop
			if prepared {
				newLoop = eval.NewPreparingMemoryLoop
			}
			loop, err := newLoop(sum, cfg)
			if err != nil {
				return err
			}
			rep, err := eval.ProbeReplay(ctx, loop, c, counter, cfg, limit)
			if err != nil {
				return err
			}
			rep.Preparations, rep.FromPreparation = loop.Preparations, loop.FromPreparation
			reps = append(reps, rep)
			if perFile || (c.Source == "locomo" && rep.Compactions > 0) {
				if err := enc.Encode(newProbeLine(rep)); err != nil {
					return err
				}
			}
		}
		if progress != nil {
			fmt.Fprint(progress, "\r\033[K")
		}
		all := eval.ProbeReport{Name: "all", Source: "all", Limit: limit}
		for _, t := range eval.ProbeTotals(reps) {
			all.Add(t)
			if err := enc.Encode(newProbeLine(t)); err != nil {
				return err
			}
		}
		if err := enc.Encode(newProbeLine(all)); err != nil {
			return err
		}
	}
	return nil
}
