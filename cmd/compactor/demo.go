package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
	"github.com/compactor/compactor/internal/wire"
)

// runDemo runs the whole system on one machine: an embedded server, the
// service, and a runtime loop that replays the bundled tau-bench run one
// message at a time, requesting a compaction (a ContextOverBudget event)
// whenever the context is over the limit.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	sf, err := addServeFlags(fs, args)
	if err != nil {
		return err
	}
	limit := fs.Int("context-limit", 6000, "the session's context limit in `TOKENS`")
	file := fs.String("file", "", "replay this conversation `FILE` instead of the bundled one")
	verbose := fs.Bool("verbose", false, "show the service's logs")
	// The demo's own defaults: a throwaway store, any free port, no metrics.
	fs.Lookup("data-dir").DefValue, fs.Lookup("nats-port").DefValue, fs.Lookup("metrics-addr").DefValue = "", "-1", ""
	_ = fs.Set("data-dir", "")
	_ = fs.Set("nats-port", "-1")
	_ = fs.Set("metrics-addr", "")
	fs.Lookup("data-dir").Usage = "embedded server: JetStream store `DIR` (default: a temporary one, removed after)"
	pos, err := parseFlags(fs, args, stdout, "demo [--context-limit N] [--file FILE] [--provider P ...]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *limit < 500 {
		return fmt.Errorf("%w: --context-limit must be >= 500", errUsage)
	}
	if err := sf.pf.validate(); err != nil {
		return err
	}
	name, msgs, err := demoConversation(*file)
	if err != nil {
		return err
	}
	if *sf.nats.url != "" {
		// A demo must never serve: against another server it would join
		// the real service's consumer and endpoints with the demo's
		// settings, and answer real sessions' requests.
		fmt.Fprintf(stderr, "compactor demo runs its own NATS server and service: the NATS URL %s (--nats-url or NATS_URL) is not used\n", redactURL(*sf.nats.url))
		*sf.nats.url = ""
	}
	kept := *sf.dataDir // "" unless --data-dir: the store is removed after
	if *sf.dataDir == "" {
		dir, err := os.MkdirTemp("", "compactor-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*sf.dataDir = dir
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		if log, err = newLogger(stderr, *sf.logFormat, *sf.logLevel); err != nil {
			return err
		}
	}

	opts, err := sf.nats.options()
	if err != nil {
		return err
	}
	// The service runs until the replay is over.
	return withService(ctx, sf, log, func(url string) error {
		return replay(ctx, url, opts, name, msgs, *limit, sf.pf, kept, stdout)
	})
}

// demoConversation is the bundled run, or the conversation in file.
func demoConversation(file string) (string, []session.Message, error) {
	data, name := demo.Trajectory, demo.Name+" (tau-bench, MIT licence © 2024 Sierra)"
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return "", nil, err
		}
		name = file
	}
	msgs, err := transcript.Parse(data)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	return name, msgs, nil
}

// withService runs the service as serve does, then f with its NATS URL,
// then stops the service.
func withService(ctx context.Context, sf *serveFlags, log *slog.Logger, f func(url string) error) error {
	svcCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(svcCtx, sf, log, func(url string) { ready <- url }) }()
	var url string
	select {
	case url = <-ready:
	case err := <-served:
		return fmt.Errorf("start the service: %w", err)
	case <-time.After(time.Minute):
		return errors.New("the service did not start within a minute")
	}
	err := f(url)
	stop()
	if serr := <-served; serr != nil && err == nil {
		err = serr
	}
	return err
}

func replay(ctx context.Context, url string, opts []nats.Option, name string, msgs []session.Message, limit int, pf *pipelineFlags, dataDir string, w io.Writer) error {
	nc, _, err := dial(ctx, url, "compactor-demo", opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The demo is a runtime: it uses the public client, as one would.
	c, err := client.New(nc, client.WithSource("urn:compactor:demo"))
	if err != nil {
		return err
	}
	sid := "demo-" + uuid.NewString()[:8]
	first := 1
	for first < len(msgs) && msgs[first-1].Role == session.RoleSystem {
		first++
	}
	imp, err := c.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: limit, Messages: wire.Must[[]client.Message](msgs[:first])})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "compactor demo: %s\n", name)
	fmt.Fprintf(w, "  %d messages, replayed one by one into session %s (model %s, context limit %d tokens)\n", len(msgs), sid, imp.Model, limit)
	fmt.Fprintf(w, "  summary provider: %s; NATS at %s\n\n", *pf.provider, url)

	counter, err := tokens.ForEncoding("o200k_base") // gpt-4o's: the runtime counts its conversation
	if err != nil {
		return err
	}
	total := counter.Context(slices.Clone(msgs))
	compacted, err := replayInto(ctx, c, sid, msgs, first, limit, w)
	if err != nil {
		return err
	}
	view, err := c.Context(ctx, sid)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nBefore: the whole conversation is %d messages, %d tokens: over the %d-token limit.\n", len(msgs), total, limit)
	fmt.Fprintf(w, "After %d compaction(s): the model sees %d messages, %d tokens (%.0f %% fewer); every original message is still stored.\n\n",
		compacted, len(view.Messages), view.Tokens, 100*(1-float64(view.Tokens)/float64(max(total, 1))))
	showContext(w, view.Messages)
	if dataDir == "" {
		fmt.Fprintf(w, "\nThe demo's server and store are gone with it. To look at the session afterwards, run it with --data-dir DIR, then: compactor serve --data-dir DIR; compactor session show %s\n", sid)
	} else {
		fmt.Fprintf(w, "\nThe session stays in %s: compactor serve --data-dir %s, then compactor session context %s; compactor session show %s\n", dataDir, dataDir, sid, sid)
	}
	return nil
}

// replayInto appends msgs from first on to session sid, one by one, as a
// runtime does, asking for a compaction whenever the context is over
// limit before a model call, and prints each; it returns how many
// compacted.
func replayInto(ctx context.Context, c *client.Client, sid string, msgs []session.Message, first, limit int, w io.Writer) (int, error) {
	compacted := 0
	for i := first; i <= len(msgs); i++ {
		if i > first {
			if _, err := c.Append(ctx, sid, wire.Must[[]client.Message](msgs[i-1:i])); err != nil {
				return compacted, err
			}
		}
		view, err := c.Context(ctx, sid)
		if err != nil {
			return compacted, err
		}
		if view.Tokens <= limit || (i < len(msgs) && msgs[i-1].Role == session.RoleAssistant && len(msgs[i-1].ToolCalls) > 0) {
			continue // fits, or the model is mid tool call: the runtime checks before its next model call
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		res, err := c.Compact(rctx, sid, client.CompactRequest{Model: "gpt-4o", ContextLimit: limit, RequestedTokens: view.Tokens, MessageCount: len(view.Messages)})
		cancel()
		var failed *client.FailedError
		if err != nil && !errors.As(err, &failed) {
			return compacted, err
		}
		if failed != nil {
			d := wire.Must[map[string]any](failed.Failed)
			fmt.Fprintf(w, "  message %2d: context %5d tokens > %d → CompactionFailed: %v: %v\n", i, view.Tokens, limit, d["reason"], d["error"])
			continue
		}
		d := wire.Must[map[string]any](res)
		if d["outcome"] == string(pipeline.OutcomeCompacted) {
			compacted++
		}
		fmt.Fprintf(w, "  message %2d: context %5d tokens > %d → %v: %s, %v → %v tokens (%v model call(s), %v ms)\n",
			i, view.Tokens, limit, d["outcome"], whatItDid(d), d["tokens_before"], d["tokens_after"], d["llm_calls"], d["duration_ms"])
	}
	return compacted, nil
}

// showContext prints the context's messages, then its summaries.
func showContext(w io.Writer, msgs []client.Message) {
	fmt.Fprintln(w, "The context now:")
	shown := wire.Must[[]session.Message](msgs)
	for _, m := range shown {
		fmt.Fprintf(w, "  [%3d] %-9s %5d tokens  %s\n", m.Seq, roleLabel(m), m.Tokens, preview(m))
	}
	for _, m := range shown {
		if m.IsCompaction {
			fmt.Fprintf(w, "\nThe summary (compaction %s):\n%s\n", m.ID, indent(pipeline.SummaryText(&m), "  "))
		}
	}
}

func roleLabel(m session.Message) string {
	if m.IsCompaction {
		return "summary"
	}
	return string(m.Role)
}

// preview is a message's first line, cut to 70 characters.
func preview(m session.Message) string {
	text := m.Text()
	if m.IsCompaction {
		text = "covers messages up to " + fmt.Sprint(m.Seq)
	}
	if text == "" && len(m.ToolCalls) > 0 {
		text = "calls " + m.ToolCalls[0].Function.Name + "(" + m.ToolCalls[0].Function.Arguments + ")"
	}
	text = strings.Join(strings.Fields(text), " ")
	if r := []rune(text); len(r) > 70 {
		text = string(r[:69]) + "…"
	}
	return text
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n"+pre)
}

// whatItDid says in words what a completed result did: the tool results it
// cleared, the messages it summarised, and whether its summary was
// prepared ahead.
func whatItDid(d map[string]any) string {
	num := func(k string) int { f, _ := d[k].(float64); return int(f) }
	var parts []string
	if n := num("tool_results_cleared"); n > 0 {
		parts = append(parts, fmt.Sprintf("%d tool result(s) cleared (%d tokens)", n, num("cleared_tokens")))
	}
	if n := num("messages_summarised"); n > 0 {
		parts = append(parts, fmt.Sprintf("%d messages summarised (summary %d tokens)", n, num("summary_tokens")))
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing new to do")
	}
	switch d["strategy"] {
	case "prepared":
		parts = append(parts, fmt.Sprintf("from a compaction prepared %.1f s ahead", float64(num("prepared_age_ms"))/1000))
	case "prepared_topup":
		parts = append(parts, fmt.Sprintf("from a compaction prepared %.1f s ahead, topped up", float64(num("prepared_age_ms"))/1000))
	}
	return strings.Join(parts, ", ")
}
