package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/config"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/tokens"
)

// pipelineFlags are the compaction and provider settings shared by serve,
// demo and compact --file: the config file gives the defaults, the flags
// override them.
type pipelineFlags struct {
	path     string // the config file ("": none)
	conf     config.Loaded
	cfg      pipeline.Config
	provider *string
	baseURL  *string
	timeout  *time.Duration
	hedge    *bool
}

// addPipelineFlags reads --config from args (it sets the flags' defaults)
// and defines the flags on fs. timeoutUsage describes --timeout (compact by
// id uses it for the wait; elsewhere it limits one summary call).
func addPipelineFlags(fs *flag.FlagSet, args []string, timeoutUsage string) (*pipelineFlags, error) {
	path := configPath(args)
	conf, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	p := &pipelineFlags{path: path, conf: conf, cfg: conf.Compaction}
	cfg := &p.cfg
	fs.String("config", "", "config `FILE` (JSON: compaction settings, provider, base_url, timeout, models, tenants); flags win over it")
	p.provider = fs.String("provider", conf.Provider, "summary `PROVIDER`: extractive (offline), openai (and compatible servers) or anthropic; keys from OPENAI_API_KEY / ANTHROPIC_API_KEY")
	p.baseURL = fs.String("base-url", conf.BaseURL, "the provider's endpoint `URL`, e.g. http://127.0.0.1:8000/v1 for vLLM (default: the provider's own API)")
	if timeoutUsage == "" {
		timeoutUsage = fmt.Sprintf("limit of one summary model call (default %v, or the config file's timeout)", conf.Timeout)
	}
	p.timeout = fs.Duration("timeout", 0, timeoutUsage)
	p.hedge = fs.Bool("hedge", true, "make a second call beside a request's summary call that runs past three times the provider's p95 (at least 2 s; a quarter of --timeout until 20 calls have answered), the first answer winning, so a hung call does not hold the request for --timeout")
	fs.IntVar(&cfg.KeepRecentTurns, "keep-recent-turns", cfg.KeepRecentTurns, "turns kept raw")
	fs.IntVar(&cfg.MaxSummaryTokens, "max-summary-tokens", cfg.MaxSummaryTokens, "the compaction message's budget in tokens (preamble, ledger and summary)")
	fs.IntVar(&cfg.MaxMessages, "max-messages", cfg.MaxMessages, "compact when the context has more messages (0: never)")
	fs.StringVar(&cfg.SummaryModel, "summary-model", cfg.SummaryModel, "summary `MODEL` (default: the session's model)")
	fs.IntVar(&cfg.SummaryContextLimit, "summary-context-limit", cfg.SummaryContextLimit, "the summary model's input limit in `TOKENS` (default: from the model table)")
	fs.Float64Var(&cfg.HeadroomRatio, "headroom", cfg.HeadroomRatio, "share of the window that summary plus raw tail aim for")
	fs.BoolVar(&cfg.KeepFirstUserMessage, "keep-first-user-message", cfg.KeepFirstUserMessage, "pin the first user message (the task)")
	fs.IntVar(&cfg.ToolOutputMaxTokens, "tool-output-max-tokens", cfg.ToolOutputMaxTokens, "clamp each tool output in the summary prompt to this many tokens")
	fs.BoolVar(&cfg.EnableIncremental, "incremental", cfg.EnableIncremental, "summarise only what is new since the last compaction")
	fs.IntVar(&cfg.MaxFailures, "max-failures", cfg.MaxFailures, "failed compactions in a row that open a session's breaker")
	fs.Var((*listFlag)(&cfg.Reductions), "reductions", "the reduction `STEPS`, in order: clear_tool_results, summarise (each only while the context is still over its target)")
	fs.IntVar(&cfg.KeepToolResults, "keep-tool-results", cfg.KeepToolResults, "the latest tool results never cleared")
	fs.IntVar(&cfg.ClearMinTokens, "clear-min-tokens", cfg.ClearMinTokens, "tool results under this many tokens are not cleared")
	fs.IntVar(&cfg.ClearAtLeast, "clear-at-least", cfg.ClearAtLeast, "clear in batches of at least this many tokens (never under min_reduction of the context)")
	fs.Var((*listFlag)(&cfg.ExcludeTools), "exclude-tools", "`TOOLS` (comma-separated) whose results are never cleared")
	fs.BoolVar(&cfg.ClearToolInputs, "clear-tool-inputs", cfg.ClearToolInputs, "clear large tool-call arguments too")
	fs.Float64Var(&cfg.LedgerShare, "ledger-share", cfg.LedgerShare, "share of the summary budget the artifact ledger (files, commands, errors and fixes, tests, ids) may take (0: no ledger)")
	fs.IntVar(&cfg.ImageTokens, "image-tokens", cfg.ImageTokens, "`TOKENS` an image of unknown size counts (a remote URL; default 765); inline images count by OpenAI's rule")
	fs.Float64Var(&cfg.PrepareAt, "prepare-at", cfg.PrepareAt, "prepare a session's next compaction when its context passes this share of its limit, so the over-budget request is answered without a model call (0: off)")
	fs.Var((*durationFlag)(&cfg.BreakerCooldown), "breaker-cooldown", "let one probe through an open breaker per `DURATION`, and count retryable failures within it once (0: only an operator reset closes a breaker)")
	return p, nil
}

// callTimeout is the limit of one summary call.
func (p *pipelineFlags) callTimeout() time.Duration {
	if *p.timeout > 0 {
		return *p.timeout
	}
	return p.conf.Timeout
}

// validate checks the parsed settings; errors are usage errors.
func (p *pipelineFlags) validate() error {
	if *p.timeout < 0 {
		return fmt.Errorf("%w: timeouts must be positive", errUsage)
	}
	if p.cfg.SummaryProvider == "" && *p.provider != "extractive" {
		p.cfg.SummaryProvider = *p.provider
	}
	if err := p.cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// summarizer builds the model router; counter sizes the extractive
// summariser's budget. A provider without its key is an error now.
func (p *pipelineFlags) summarizer(counter *tokens.Counter) (*router.Router, error) {
	var hedge *router.Hedge
	if !*p.hedge {
		hedge = &router.Hedge{}
	}
	return router.FromSettings(router.Settings{Provider: *p.provider, BaseURL: *p.baseURL, Timeout: p.callTimeout(), Hedge: hedge,
		Models: p.conf.Models, Extractive: extractive.New(counter)})
}

// durationFlag is a pipeline.Duration as a flag.
type durationFlag pipeline.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }
func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("must be >= 0")
	}
	*d = durationFlag(v)
	return nil
}

// listFlag is a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
