package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/bench"
	"github.com/compactor/compactor/internal/harness/eval"
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

// evalVerbs are eval's subcommands; each takes only its own flags.
func evalVerbs() map[string]func(context.Context, []string, io.Writer, io.Writer) error {
	return map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"replay":           evalReplay,
		"probes":           evalProbesVerb,
		"compare-ladder":   evalCompareLadder,
		"compare-prepared": evalComparePrepared,
		"drift":            evalDrift,
		"recall":           evalRecall,
	}
}

const evalUsage = `  compactor eval replay [--data DIR] [--long] [--limits 2000,4000] [--mode both] [--service] [--per-file]
  compactor eval probes [--data DIR] [--long] [--limits 2000,4000] [--prepared] [--provider P --base-url URL --summary-model M]
  compactor eval compare-ladder [--data DIR] [--limits 2000,4000]
  compactor eval compare-prepared [--data DIR] [--long] --limits N [--pace 0.25] [--shape NAME] [--model-delay 2s] [--trace FILE] [--together]
  compactor eval drift [--limits 3000,4000] [--cases 6] [--seed 1] [--provider P]
  compactor eval recall [--data DIR] [--limits 4000] [--out docs/RECALL.md] [--quick]`

// evalModeFlags are the first layout's mode flags (eval --probes ...),
// each now a verb: they are still taken, with a note on stderr.
var evalModeFlags = []string{"probes", "compare-ladder", "compare-prepared", "drift", "recall"}

// runEval dispatches "eval VERB ...". Flags with no verb are the replay's
// (eval --data DIR is eval replay --data DIR); a first-layout mode flag
// (eval --drift) runs its verb.
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stdout, "Usage:\n%s\nRun 'compactor eval VERB --help' for a verb's flags.\n", evalUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: eval needs a verb", errUsage)
		}
		return errHelp
	}
	verb, rest := args[0], args[1:]
	if strings.HasPrefix(verb, "-") {
		verb, rest = "replay", args
		if mode, others, ok := evalModeFlag(args); ok {
			fmt.Fprintf(stderr, "compactor eval: --%s is now a verb: compactor eval %s\n", mode, mode)
			verb, rest = mode, others
		}
	}
	run, ok := evalVerbs()[verb]
	if !ok {
		return fmt.Errorf("%w: unknown eval verb %q", errUsage, verb)
	}
	return run(ctx, rest, stdout, stderr)
}

// evalModeFlag finds a first-layout mode flag in args (--drift, -drift,
// --drift=true) and returns its verb and the other arguments.
func evalModeFlag(args []string) (string, []string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		name := strings.TrimLeft(a, "-")
		if name == a {
			continue
		}
		name, value, _ := strings.Cut(name, "=")
		if value == "false" || !slices.Contains(evalModeFlags, name) { // --drift=false is no mode: the replay refuses it
			continue
		}
		return name, append(slices.Clone(args[:i]), args[i+1:]...), true
	}
	return "", nil, false
}

// evalFlags are eval's flags; each verb registers those it takes.
type evalFlags struct {
	data, limits, mode, trace, speakers, provider, baseURL, summaryModel string
	shape                                                                string
	maxSummary, maxMessages                                              int
	perFile, progress, together, probesPrepared, long, service, quick    bool
	cases, queries                                                       int
	out                                                                  string
	seed                                                                 uint64
	modelDelay                                                           time.Duration
	prepareAt, pace                                                      float64
	fs                                                                   *flag.FlagSet
}

// newEvalFlags starts verb's flags: --limits (default limits) and
// --progress, which every verb takes.
func newEvalFlags(verb, limits string, stderr io.Writer) *evalFlags {
	f := &evalFlags{fs: flag.NewFlagSet("eval "+verb, flag.ContinueOnError)}
	f.fs.StringVar(&f.limits, "limits", limits, "comma-separated context `LIMITS` to replay at")
	f.fs.BoolVar(&f.progress, "progress", isTerminal(stderr), "show progress on stderr (default: when stderr is a terminal)")
	return f
}

// dataFlags: the data set (--data, --long, --speakers).
func (f *evalFlags) dataFlags() {
	f.fs.StringVar(&f.data, "data", "../shared/data", "data `DIR` laid out as shared/data (locomo/, agent_trajectories/)")
	f.fs.BoolVar(&f.long, "long", false, "replay the long agent runs instead (DIR/agent_trajectories/long: mini-swe-agent and OpenHands, 75k-290k tokens each)")
	f.fs.StringVar(&f.speakers, "speakers", "name", "how LoCoMo's chats are stored: `FORM` name (the speaker in each message's name), prefix (\"Speaker: text\" in the content, no name) or anonymous (neither)")
}

// summaryFlags: the compaction message's budget and, with messages, the
// message trigger.
func (f *evalFlags) summaryFlags(messages bool) {
	f.fs.IntVar(&f.maxSummary, "max-summary-tokens", pipeline.DefaultConfig().MaxSummaryTokens, "the compaction message's budget in tokens (preamble, ledger and summary)")
	if messages {
		f.fs.IntVar(&f.maxMessages, "max-messages", pipeline.DefaultConfig().MaxMessages, "compact when the context has more messages (0: only the token limit; with --long, 0 unless set: an agent at a real window compacts at its limit)")
	}
}

// modelFlags: the summary model (the offline summariser unless
// --provider).
func (f *evalFlags) modelFlags() {
	f.fs.StringVar(&f.provider, "provider", "extractive", "the summary `PROVIDER` (extractive, openai or anthropic; keys from OPENAI_API_KEY / ANTHROPIC_API_KEY)")
	f.fs.StringVar(&f.baseURL, "base-url", "", "the provider's endpoint `URL`")
	f.fs.StringVar(&f.summaryModel, "summary-model", "", "the summary `MODEL` (default: gpt-4o, the replayed sessions' model)")
}

// perFileFlag: --per-file.
func (f *evalFlags) perFileFlag() {
	f.fs.BoolVar(&f.perFile, "per-file", false, "print a report line per conversation too")
}

// parse parses args against the verb's flags (synopsis for --help) and
// returns --limits.
func (f *evalFlags) parse(args []string, stdout io.Writer, synopsis string) ([]int, error) {
	pos, err := parseFlags(f.fs, args, stdout, synopsis)
	if err != nil {
		return nil, err
	}
	if err := noArgs(pos); err != nil {
		return nil, err
	}
	if f.long && f.fs.Lookup("max-messages") != nil && !flagSet(f.fs, "max-messages") {
		f.maxMessages = 0
	}
	return f.limitList()
}

// progressTo is where progress goes: stderr with --progress, else nowhere.
func (f *evalFlags) progressTo(stderr io.Writer) io.Writer {
	if f.progress {
		return stderr
	}
	return nil
}

// evalReplay is eval replay: every conversation at each limit, incremental
// and from scratch, in process or through the service.
func evalReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags("replay", "2000,4000", stderr)
	f.dataFlags()
	f.summaryFlags(true)
	f.perFileFlag()
	f.fs.StringVar(&f.mode, "mode", "both", "`MODE`: incremental, scratch or both")
	f.fs.BoolVar(&f.service, "service", false, "replay through the service: an embedded nats-server, sessions in KV, requests and results as CloudEvents (slower; the same figures)")
	lims, err := f.parse(args, stdout, "eval replay [--data DIR] [--long] [--limits 2000,4000] [--mode both] [--service] [--per-file]")
	if err != nil {
		return err
	}
	modes := map[string][]bool{"incremental": {true}, "scratch": {false}, "both": {true, false}}[f.mode]
	if modes == nil {
		return fmt.Errorf("%w: --mode must be incremental, scratch or both", errUsage)
	}
	counter, convs, err := f.load()
	if err != nil {
		return err
	}
	sum, enc := extractive.New(counter), json.NewEncoder(stdout)
	for _, limit := range lims {
		for _, incremental := range modes {
			if err := f.replayAll(ctx, enc, convs, counter, sum, limit, incremental, stderr); err != nil {
				return err
			}
		}
	}
	return nil
}

// evalProbesVerb is eval probes: probes checked after every compaction
// of the replay, per category and source.
func evalProbesVerb(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags("probes", "2000,4000", stderr)
	f.dataFlags()
	f.summaryFlags(true)
	f.modelFlags()
	f.perFileFlag()
	f.fs.BoolVar(&f.probesPrepared, "prepared", false, "the prepared path (each append past prepare_at prepares the next compaction, which the request commits), probes checked the same")
	lims, err := f.parse(args, stdout, "eval probes [--data DIR] [--long] [--limits 2000,4000] [--prepared] [--provider P --base-url URL --summary-model M] [--per-file]")
	if err != nil {
		return err
	}
	counter, convs, err := f.load()
	if err != nil {
		return err
	}
	return f.runProbes(ctx, json.NewEncoder(stdout), convs, counter, extractive.New(counter), lims, f.progressTo(stderr))
}

// evalCompareLadder is eval compare-ladder: the reduction ladder (clear
// tool results, then summarise) against summary only, a line per set and
// limit.
func evalCompareLadder(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags("compare-ladder", "2000,4000", stderr)
	f.dataFlags()
	f.summaryFlags(true)
	lims, err := f.parse(args, stdout, "eval compare-ladder [--data DIR] [--long] [--limits 2000,4000]")
	if err != nil {
		return err
	}
	counter, convs, err := f.load()
	if err != nil {
		return err
	}
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens, cfg.MaxMessages = f.maxSummary, f.maxMessages
	rows, err := eval.CompareLadderSets(ctx, convs, counter, extractive.New(counter), cfg, lims, f.progressTo(stderr))
	if err != nil {
		return err
	}
	return encodeAll(json.NewEncoder(stdout), rows)
}

// evalComparePrepared is eval compare-prepared: blocking against prepared
// compactions through the service, every conversation at once, paced.
func evalComparePrepared(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags("compare-prepared", "4000", stderr)
	f.dataFlags()
	f.summaryFlags(false)
	f.fs.DurationVar(&f.modelDelay, "model-delay", 2*time.Second, "how long every summary call of the OpenAI-compatible stand-in model takes")
	f.fs.Float64Var(&f.prepareAt, "prepare-at", pipeline.DefaultConfig().PrepareAt, "the prepared mode's prepare_at")
	f.fs.StringVar(&f.trace, "trace", "", "write a JSON line per request and per preparation to `FILE` (mode, session, message, strategy, tokens before and after, summary input): why one mode spent more than the other")
	f.fs.Float64Var(&f.pace, "pace", 0.25, "the messages' pacing, as a share of a real agent loop's (1: real time; smaller is faster and leaves preparations less time)")
	f.fs.StringVar(&f.shape, "shape", "", "vary the conversations and their pace: recorded, big-observations (every sixth tool output grown to 30% of the window), bursts (12 messages at a tenth of their pace after each long idle) or slow (steps five times slower)")
	f.fs.BoolVar(&f.together, "together", false, "run the two modes at the same time (half the time; they share the CPU)")
	lims, err := f.parse(args, stdout, "eval compare-prepared [--data DIR] [--long] --limits N [--pace 0.25] [--shape NAME] [--model-delay 2s] [--trace FILE] [--together]")
	if err != nil {
		return err
	}
	if len(lims) != 1 {
		return fmt.Errorf("%w: compare-prepared takes one limit (--limits 4000)", errUsage)
	}
	_, convs, err := f.load()
	if err != nil {
		return err
	}
	return f.runComparePrepared(ctx, json.NewEncoder(stdout), convs, lims, f.progressTo(stderr))
}

// evalDrift is eval drift: the drift suite.
func evalDrift(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags("drift", driftLimits, stderr)
	f.fs.IntVar(&f.maxSummary, "max-summary-tokens", pipeline.DefaultConfig().MaxSummaryTokens, "the compaction message's budget in tokens (preamble, ledger and summary)")
	f.modelFlags()
	f.perFileFlag()
	f.fs.IntVar(&f.cases, "cases", 6, "how many sessions to make")
	f.fs.Uint64Var(&f.seed, "seed", 1, "the seed the sessions are made from")
	lims, err := f.parse(args, stdout, "eval drift [--limits "+driftLimits+"] [--cases 6] [--seed 1] [--provider P --base-url URL --summary-model M] [--per-file]")
	if err != nil {
		return err
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return err
	}
	return f.runDrift(ctx, json.NewEncoder(stdout), counter, lims, f.progressTo(stderr))
}

// evalRecall is eval recall: what a search finds of what compaction
// summarised, and search latency through the endpoint.
func evalRecall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags("recall", "4000", stderr)
	f.fs.StringVar(&f.data, "data", "../shared/data", "data `DIR` laid out as shared/data (locomo/, agent_trajectories/)")
	f.fs.StringVar(&f.out, "out", "", "also write the run as Markdown to `FILE` (docs/RECALL.md)")
	f.fs.IntVar(&f.queries, "queries", 200, "searches timed at each session length")
	f.fs.BoolVar(&f.quick, "quick", false, "shorter latency runs (500 and 2,000 messages, 40 searches)")
	lims, err := f.parse(args, stdout, "eval recall [--data DIR] [--limits 4000] [--out FILE] [--queries 200] [--quick]")
	if err != nil {
		return err
	}
	return f.runRecall(ctx, json.NewEncoder(stdout), lims, f.progressTo(stderr))
}

// load reads the conversations and the counter they are counted with.
func (f *evalFlags) load() (*tokens.Counter, []transcript.Conversation, error) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, nil, err
	}
	convs, err := f.conversations()
	return counter, convs, err
}

// limitList reads --limits.
func (f *evalFlags) limitList() ([]int, error) {
	var lims []int
	for _, s := range strings.Split(f.limits, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: --limits: %q is not a positive number", errUsage, s)
		}
		lims = append(lims, n)
	}
	return lims, nil
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

// runProbes is eval probes.
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

// runComparePrepared is eval compare-prepared.
func (f *evalFlags) runComparePrepared(ctx context.Context, enc *json.Encoder, convs []transcript.Conversation, lims []int, pw io.Writer) error {
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

// probeLine is a line of `compactor eval probes`: the probes of one
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
				fmt.Fprintf(progress, "\r\033[Keval probes: limit %d: %d/%d %s", limit, i+1, len(convs), c.Name)
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
