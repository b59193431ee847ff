package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/compactor/compactor/internal/config"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// compactOutput is what `compact --file` prints.
type compactOutput struct {
	Result  *pipeline.Result  `json:"result"`
	Context []session.Message `json:"context"`
	Tokens  int               `json:"tokens"`
}

func runCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The config file gives the defaults the flags then override.
	conf, err := config.Load(configPath(args))
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	cfg := conf.Compaction
	fs.String("config", "", "config `FILE` (JSON: compaction settings, provider, base_url, timeout, models); flags win over it")
	file := fs.String("file", "", "conversation `FILE`: a JSON array of chat messages, an object with \"messages\", or JSON lines ('-' for stdin)")
	model := fs.String("model", "gpt-4o", "the session's `MODEL` (sets the token encoding and the default context limit)")
	limit := fs.Int("context-limit", 0, "context limit in `TOKENS` (default: the model's window)")
	trigger := fs.String("trigger", string(pipeline.TriggerOverBudget), "`TRIGGER`: over_budget, overflow or manual")
	focus := fs.String("focus", "", "a `TOPIC` to keep in full detail")
	provider := fs.String("provider", conf.Provider, "summary `PROVIDER`: extractive (offline), openai (and compatible servers) or anthropic; keys from OPENAI_API_KEY / ANTHROPIC_API_KEY")
	baseURL := fs.String("base-url", conf.BaseURL, "the provider's endpoint `URL`, e.g. http://127.0.0.1:8000/v1 for vLLM (default: the provider's own API)")
	callTimeout := fs.Duration("timeout", conf.Timeout, "limit of one summary model call")
	fs.IntVar(&cfg.KeepRecentTurns, "keep-recent-turns", cfg.KeepRecentTurns, "turns kept raw")
	fs.IntVar(&cfg.MaxSummaryTokens, "max-summary-tokens", cfg.MaxSummaryTokens, "summary budget in tokens")
	fs.IntVar(&cfg.MaxMessages, "max-messages", cfg.MaxMessages, "compact when the context has more messages (0: never)")
	fs.StringVar(&cfg.SummaryModel, "summary-model", cfg.SummaryModel, "summary `MODEL` (default: the session's model)")
	fs.IntVar(&cfg.SummaryContextLimit, "summary-context-limit", cfg.SummaryContextLimit, "the summary model's input limit in `TOKENS` (default: from the model table)")
	fs.Float64Var(&cfg.HeadroomRatio, "headroom", cfg.HeadroomRatio, "share of the window that summary plus raw tail aim for")
	fs.BoolVar(&cfg.KeepFirstUserMessage, "keep-first-user-message", cfg.KeepFirstUserMessage, "pin the first user message (the task)")
	fs.IntVar(&cfg.ToolOutputMaxTokens, "tool-output-max-tokens", cfg.ToolOutputMaxTokens, "clamp each tool output in the summary prompt to this many tokens")
	fs.BoolVar(&cfg.EnableIncremental, "incremental", cfg.EnableIncremental, "summarise only what is new since the last compaction")
	pos, err := parseFlags(fs, args, stdout, "compact --file FILE [flags]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return fmt.Errorf("%w (compacting a stored session by id needs the service; use --file FILE here)", err)
	}
	if *file == "" {
		return fmt.Errorf("%w: --file is required", errUsage)
	}
	if *callTimeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	if *limit < 0 {
		return fmt.Errorf("%w: --context-limit must be >= 0", errUsage)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	var data []byte
	if *file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	msgs, err := transcript.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}

	counter, err := tokens.ForEncoding(conf.Models.Lookup(*model).Encoding)
	if err != nil {
		return err
	}
	for i := range msgs {
		counter.Ensure(&msgs[i])
	}
	store, breakers := memstore.New(), memstore.NewBreakers()
	id := uuid.NewString()
	if _, err := store.Create(ctx, session.Record{SessionID: id, Model: *model, ContextLimit: *limit}, msgs); err != nil {
		return err
	}
	if cfg.SummaryProvider == "" && *provider != "extractive" {
		cfg.SummaryProvider = *provider
	}
	sum, err := router.FromSettings(router.Settings{Provider: *provider, BaseURL: *baseURL, Timeout: *callTimeout,
		Models: conf.Models, Extractive: extractive.New(counter)})
	if err != nil {
		return err
	}
	svc, err := pipeline.New(store, breakers, sum, cfg, pipeline.WithModels(conf.Models))
	if err != nil {
		return err
	}
	res, cerr := svc.Compact(ctx, pipeline.Request{ID: uuid.NewString(), SessionID: id, Trigger: pipeline.Trigger(*trigger), Focus: *focus})
	if cerr != nil && errors.Is(cerr, pipeline.ErrInvalidRequest) {
		return fmt.Errorf("%w: %v", errUsage, cerr)
	}
	sess, err := store.Load(ctx, id, false)
	if err != nil {
		return err
	}
	out := compactOutput{Result: res, Context: pipeline.ContextOf(sess)}
	out.Tokens = counter.Context(out.Context)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	if cerr != nil {
		fmt.Fprintf(stderr, "compactor compact: %v\n", cerr)
		return errFailed
	}
	return nil
}

// configPath finds --config in args before the flags are parsed, since the
// file sets the flags' defaults.
func configPath(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, p := range []string{"--config=", "-config="} {
			if v, ok := strings.CutPrefix(a, p); ok {
				return v
			}
		}
		if (a == "--config" || a == "-config") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
