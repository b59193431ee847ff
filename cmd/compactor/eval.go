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
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	data := fs.String("data", "../shared/data", "data `DIR` laid out as shared/data (locomo/, agent_trajectories/)")
	limits := fs.String("limits", "2000,4000", "comma-separated context `LIMITS` to replay at")
	mode := fs.String("mode", "both", "`MODE`: incremental, scratch or both")
	maxSummary := fs.Int("max-summary-tokens", pipeline.DefaultConfig().MaxSummaryTokens, "summary budget in tokens")
	perFile := fs.Bool("per-file", false, "print a report line per conversation too")
	maxMessages := fs.Int("max-messages", pipeline.DefaultConfig().MaxMessages, "compact when the context has more messages (0: only the token limit; with --long, 0 unless set: an agent at a real window compacts at its limit)")
	compare := fs.Bool("compare-ladder", false, "compare the reduction ladder (clear tool results, then summarise) with summary only, in one run: the agent trajectories and LoCoMo, a line per set and limit")
	progress := fs.Bool("progress", isTerminal(stderr), "show progress on stderr (default: when stderr is a terminal)")
	comparePrepared := fs.Bool("compare-prepared", false, "compare blocking and prepared compactions through the service, in one run: every conversation at once, paced, with an OpenAI-compatible stand-in model whose every call takes --model-delay (one line per mode, then the comparison); --limits takes one limit")
	modelDelay := fs.Duration("model-delay", 2*time.Second, "with --compare-prepared: how long every summary call takes")
	prepareAt := fs.Float64("prepare-at", pipeline.DefaultConfig().PrepareAt, "with --compare-prepared: the prepared mode's prepare_at")
	trace := fs.String("trace", "", "with --compare-prepared: write a JSON line per request to `FILE` (mode, session, message, strategy, tokens before and after, summary input): why one mode spent more than the other")
	pace := fs.Float64("pace", 0.25, "with --compare-prepared: the messages' pacing, as a share of a real agent loop's (1: real time; smaller is faster and leaves preparations less time)")
	together := fs.Bool("together", false, "with --compare-prepared: run the two modes at the same time (half the time; they share the CPU)")
	speakers := fs.String("speakers", "name", "how LoCoMo's chats are stored: `FORM` name (the speaker in each message's name), prefix (\"Speaker: text\" in the content, no name) or anonymous (neither)")
	probesPrepared := fs.Bool("prepared", false, "with --probes: the prepared path (each append past prepare_at prepares the next compaction, which the request commits), probes checked the same")
	probes := fs.Bool("probes", false, "check probes after every compaction of the replay (files touched, errors, commands, decisions, the user's instructions, plan items and their status, LoCoMo answers) and report them per category and source; LoCoMo beside its truncation baselines, per conversation")
	provider := fs.String("provider", "extractive", "with --probes: the summary `PROVIDER` (extractive, openai or anthropic; keys from OPENAI_API_KEY / ANTHROPIC_API_KEY)")
	baseURL := fs.String("base-url", "", "with --probes: the provider's endpoint `URL`")
	summaryModel := fs.String("summary-model", "", "with --probes: the summary `MODEL` (default: gpt-4o, the replayed sessions' model)")
	long := fs.Bool("long", false, "replay the long agent runs instead (DIR/agent_trajectories/long: mini-swe-agent and OpenHands, 75k-290k tokens each)")
	service := fs.Bool("service", false, "replay through the service: an embedded nats-server, sessions in KV, requests and results as CloudEvents (slower; the same figures)")
	pos, err := parseFlags(fs, args, stdout, "eval [--data DIR] [--long] [--limits 2000,4000] [--mode both] [--service] [--per-file]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *long && !flagSet(fs, "max-messages") {
		*maxMessages = 0
	}
	var lims []int
	for _, f := range strings.Split(*limits, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: --limits: %q is not a positive number", errUsage, f)
		}
		lims = append(lims, n)
	}
	modes := map[string][]bool{"incremental": {true}, "scratch": {false}, "both": {true, false}}[*mode]
	if modes == nil {
		return fmt.Errorf("%w: --mode must be incremental, scratch or both", errUsage)
	}
	load := transcript.LoadDataDir
	if *long {
		load = func(dir string) ([]transcript.Conversation, error) {
			return transcript.LoadLongDir(filepath.Join(dir, "agent_trajectories", "long"))
		}
	}
	convs, err := load(*data)
	if err != nil {
		return err
	}
	if convs, err = transcript.WithSpeakers(convs, *speakers); err != nil {
		return fmt.Errorf("%w: --speakers: %v", errUsage, err)
	}
	if len(convs) == 0 {
		return fmt.Errorf("no conversations found under %s", *data)
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return err
	}
	sum := extractive.New(counter)
	enc := json.NewEncoder(stdout)
	if *probes {
		var pw io.Writer
		if *progress {
			pw = stderr
		}
		cfg := pipeline.DefaultConfig()
		cfg.MaxSummaryTokens, cfg.MaxMessages, cfg.SummaryModel = *maxSummary, *maxMessages, *summaryModel
		var ps pipeline.Summarizer = sum
		if *provider != "extractive" {
			r, err := router.FromSettings(router.Settings{Provider: *provider, BaseURL: *baseURL, Extractive: sum})
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			ps, cfg.SummaryProvider = r, *provider
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return evalProbes(ctx, enc, convs, counter, ps, cfg, lims, *perFile, *probesPrepared, pw)
	}
	if *comparePrepared {
		if len(lims) != 1 {
			return fmt.Errorf("%w: --compare-prepared takes one limit (--limits 4000)", errUsage)
		}
		if *modelDelay <= 0 || *pace <= 0 {
			return fmt.Errorf("%w: --model-delay and --pace must be positive", errUsage)
		}
		var pw io.Writer
		if *progress {
			pw = stderr
		}
		cfg := pipeline.DefaultConfig()
		cfg.MaxSummaryTokens, cfg.PrepareAt = *maxSummary, *prepareAt
		if err := cfg.Validate(); err != nil || *prepareAt == 0 {
			return fmt.Errorf("%w: --prepare-at must be in (0, 1)", errUsage)
		}
		opt := bench.PreparedOptions{Limit: lims[0], ModelDelay: *modelDelay, Pace: *pace, Progress: pw, Together: *together}
		if *trace != "" {
			f, err := os.Create(*trace)
			if err != nil {
				return err
			}
			defer f.Close()
			opt.Trace = f
		}
		cmp, err := bench.ComparePrepared(ctx, convs, cfg, opt)
		if err != nil {
			return err
		}
		for _, r := range []any{cmp.Blocking, cmp.Prepared, cmp} {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if *compare {
		var pw io.Writer
		if *progress {
			pw = stderr
		}
		cfg := pipeline.DefaultConfig()
		cfg.MaxSummaryTokens = *maxSummary
		cfg.MaxMessages = *maxMessages
		rows, err := eval.CompareLadderSets(ctx, convs, counter, sum, cfg, lims, pw)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	for _, limit := range lims {
		for _, incremental := range modes {
			cfg := pipeline.DefaultConfig()
			cfg.EnableIncremental, cfg.MaxSummaryTokens, cfg.MaxMessages = incremental, *maxSummary, *maxMessages
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			total := evalSummary{Limit: limit, Incremental: incremental, Service: *service}
			var loop eval.Loop
			if *service {
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
				if *progress {
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
				if *perFile {
					if err := enc.Encode(rep); err != nil {
						return err
					}
				}
				total.Sessions++
				total.Compactions += rep.Compactions
				total.Failures += rep.Failures
				total.LLMCalls += rep.LLMCalls
				total.Tokens += rep.Tokens
				total.InputTokens += rep.InputTokens
				total.TokensSaved += rep.TokensSaved
				total.pinnedHead += rep.PinnedHead
				total.headKept += rep.HeadKept
				if rep.Retention != nil {
					if total.Retention == nil {
						total.Retention = &eval.Retention{}
					}
					*total.Retention = total.Retention.Add(*rep.Retention)
				}
			}
			if *progress {
				fmt.Fprint(stderr, "\r\033[K")
			}
			if total.Tokens > 0 {
				total.CostRatio = float64(total.InputTokens) / float64(total.Tokens)
			}
			if total.Retention != nil {
				total.Share = total.Retention.Share()
			}
			if total.pinnedHead > 0 {
				total.PinnedHeadKept = float64(total.headKept) / float64(total.pinnedHead)
			}
			if err := enc.Encode(total); err != nil {
				return err
			}
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
