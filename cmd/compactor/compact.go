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
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
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
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	pf, err := addPipelineFlags(fs, args, "with an ID: how long to wait for the result (default 2m); with --file: limit of one summary model call (default 1m, or the config file's timeout)")
	if err != nil {
		return err
	}
	nf := addNATSFlags(fs, defaultNATSURL)
	file := fs.String("file", "", "conversation `FILE` to compact in-process, no server: a JSON array of chat messages, an object with \"messages\", or JSON lines ('-' for stdin)")
	model := fs.String("model", "", "the session's `MODEL` (sets the token encoding and the default context limit; default: gpt-4o, or the stored session's)")
	limit := fs.Int("context-limit", 0, "context limit in `TOKENS` (default: the model's window, or the stored session's limit)")
	trigger := fs.String("trigger", string(pipeline.TriggerOverBudget), "`TRIGGER`: over_budget or overflow (and manual with --file)")
	focus := fs.String("focus", "", "a `TOPIC` to keep in full detail")
	pos, err := parseFlags(fs, args, stdout, "compact ID [--trigger over_budget|overflow] [--timeout D]\n       compactor compact --file FILE [flags]")
	if err != nil {
		return err
	}
	if *limit < 0 {
		return fmt.Errorf("%w: --context-limit must be >= 0", errUsage)
	}
	if err := pf.validate(); err != nil {
		return err
	}
	switch {
	case *file != "" && len(pos) > 0:
		return fmt.Errorf("%w: give a session ID or --file, not both", errUsage)
	case len(pos) > 1:
		return fmt.Errorf("%w: one session ID at a time, got %d", errUsage, len(pos))
	case len(pos) == 1:
		return compactStored(ctx, nf, pos[0], *trigger, *pf.timeout, client.CompactRequest{Model: *model,
			ContextLimit: *limit, Focus: *focus, SummaryModel: pf.cfg.SummaryModel, SummaryContextLimit: pf.cfg.SummaryContextLimit}, stdout)
	case *file == "":
		return fmt.Errorf("%w: give a stored session's ID, or --file FILE", errUsage)
	}
	if *model == "" {
		*model = "gpt-4o"
	}
	return compactFile(ctx, pf, *file, session.Record{Model: *model, ContextLimit: *limit}, pipeline.Trigger(*trigger), *focus, stdout, stderr)
}

// readConversation reads a conversation from file ("-": stdin).
func readConversation(file string) ([]session.Message, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	msgs, err := transcript.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return msgs, nil
}

// compactFile compacts the conversation in file in process, as a session
// of rec's model and limit, and prints the result and the context it
// leaves: exit 0 when compacted, 1 when the compaction failed.
func compactFile(ctx context.Context, pf *pipelineFlags, file string, rec session.Record, trigger pipeline.Trigger, focus string, stdout, stderr io.Writer) error {
	msgs, err := readConversation(file)
	if err != nil {
		return err
	}
	counter, err := tokens.ForEncoding(pf.conf.Models.Lookup(rec.Model).Encoding)
	if err != nil {
		return err
	}
	for i := range msgs {
		counter.Ensure(&msgs[i])
	}
	store, breakers := memstore.New(), memstore.NewBreakers()
	id := uuid.NewString()
	rec.SessionID = id
	if _, err := store.Create(ctx, rec, msgs); err != nil {
		return err
	}
	sum, err := pf.summarizer(counter)
	if err != nil {
		return err
	}
	svc, err := pipeline.New(store, breakers, sum, pf.cfg, pipeline.WithModels(pf.conf.Models))
	if err != nil {
		return err
	}
	res, cerr := svc.Compact(ctx, pipeline.Request{ID: uuid.NewString(), SessionID: id, Trigger: trigger, Focus: focus})
	if cerr != nil && errors.Is(cerr, pipeline.ErrInvalidRequest) {
		return fmt.Errorf("%w: %v", errUsage, cerr)
	}
	sess, err := store.Load(ctx, id, false)
	if err != nil {
		return err
	}
	out := compactOutput{Result: res, Context: pipeline.ContextOf(sess)}
	out.Tokens = counter.Context(out.Context)
	if err := printJSON(stdout, out); err != nil {
		return err
	}
	if cerr != nil {
		fmt.Fprintf(stderr, "compactor compact: %v\n", cerr)
		return errFailed
	}
	return nil
}

// compactStored publishes a request event for a stored session and prints
// its result event's data: exit 0 when completed, 1 when failed.
func compactStored(ctx context.Context, nf *natsFlags, sid, trigger string, wait time.Duration, req client.CompactRequest, stdout io.Writer) error {
	t := pipeline.Trigger(trigger)
	if _, ok := contract.RequestRoute(t); !ok {
		return fmt.Errorf("%w: --trigger %q: a stored session takes over_budget or overflow", errUsage, trigger)
	}
	if err := contract.CheckSessionID(sid); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	conn, err := nf.connect(ctx, "compactor-cli", "compact needs the runtime, compactor or admin user")
	if err != nil {
		return err
	}
	defer conn.Close()
	req.Trigger = client.Trigger(t)
	if t == pipeline.TriggerOverflow {
		req.ErrorCode, req.ErrorMessage = "manual", "requested with compactor compact --trigger overflow"
	}
	c, err := client.New(conn.nc, client.WithSource(cliSource))
	if err != nil {
		return err
	}
	res, err := c.Compact(conn.ctx, sid, req)
	var failed *client.FailedError
	if err = conn.err(err); err != nil && !errors.As(err, &failed) {
		if errors.Is(err, client.ErrNoResult) {
			return fmt.Errorf("%w after %v: %s", err, wait, whyNoResult(conn.nc))
		}
		return err
	}
	// The result event's data, the keys in the contract's order.
	var out any = res
	if failed != nil {
		out = failed.Failed
	}
	if err := printJSON(stdout, out); err != nil {
		return err
	}
	if failed != nil {
		return errFailed
	}
	return nil
}

// whyNoResult says why a request may have gone unanswered: no service
// runs against this server, or one does and is slow to answer.
func whyNoResult(nc *nats.Conn) string {
	if _, err := nc.Request("$SRV.PING."+contract.ServiceName, nil, 2*time.Second); err != nil {
		return "no compactor service answers on this NATS server: is `compactor serve` running against it? The request is stored and will be answered when one runs"
	}
	return "a compactor service runs but has not answered yet (busy, or its summary model is slow): the request is stored and will still be answered; raise --timeout to wait longer"
}

// cliSource is the CloudEvents source of the CLI's requests.
const cliSource = "urn:compactor:cli"

// printJSON writes v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// configPath finds --config in args before the flags are parsed, since the
// file sets the flags' defaults; else COMPACTOR_CONFIG.
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
	return os.Getenv(envName("config"))
}
