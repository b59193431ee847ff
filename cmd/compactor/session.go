package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/config"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
)

// subcommand dispatches "NOUN VERB ...".
func subcommand(noun string, verbs map[string]func(context.Context, []string, io.Writer) error, usage string) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprintf(stdout, "Usage:\n%s\nRun 'compactor %s VERB --help' for a verb's flags.\n", usage, noun)
			if len(args) == 0 {
				return fmt.Errorf("%w: %s needs a verb", errUsage, noun)
			}
			return errHelp
		}
		verb, ok := verbs[args[0]]
		if !ok {
			return fmt.Errorf("%w: unknown %s verb %q", errUsage, noun, args[0])
		}
		return verb(ctx, args[1:], stdout)
	}
}

const sessionUsage = `  compactor session import FILE [--session-id ID] [--model M] [--context-limit N]
  compactor session show ID
  compactor session context ID`

func runSession(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand("session", map[string]func(context.Context, []string, io.Writer) error{
		"import": sessionImport, "show": sessionShow, "context": sessionContext,
	}, sessionUsage)(ctx, args, stdout, stderr)
}

// opTimeout bounds a CLI command's store operations.
const opTimeout = 2 * time.Minute

func sessionImport(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("session import", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	id := fs.String("session-id", "", "the session's `ID` (default: a new UUID); letters, digits, '-' and '_'")
	model := fs.String("model", "gpt-4o", "the session's `MODEL`: its token encoding and default window")
	limit := fs.Int("context-limit", 0, "the session's context limit in `TOKENS` (default: the model's window)")
	cfgPath := fs.String("config", "", "config `FILE` whose model table to use")
	pos, err := parseFlags(fs, args, stdout, "session import FILE [--session-id ID] [--model M] [--context-limit N]")
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one conversation FILE ('-' for stdin)", errUsage)
	}
	if *limit < 0 {
		return fmt.Errorf("%w: --context-limit must be >= 0", errUsage)
	}
	if *id != "" && !events.ValidSessionID(*id) {
		return fmt.Errorf("%w: --session-id %q must be 1-200 letters, digits, '-' or '_'", errUsage, *id)
	}
	conf, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	var data []byte
	if pos[0] == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return err
	}
	msgs, err := transcript.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	return withStores(ctx, nf, func(ctx context.Context, _ jetstream.JetStream, sessions *kvstore.Sessions, _ *kvstore.Breakers) error {
		out, err := api.CreateSession(ctx, sessions, conf.Models, session.Record{SessionID: *id, Model: *model, ContextLimit: *limit}, msgs)
		if errors.Is(err, session.ErrExists) {
			return fmt.Errorf("session %s exists already: choose another --session-id", *id)
		}
		if err != nil {
			return err
		}
		return printJSON(stdout, out)
	})
}

// sessionArg parses a verb taking one session ID.
func sessionArg(name string, args []string, stdout io.Writer) (*natsFlags, string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	pos, err := parseFlags(fs, args, stdout, name+" ID")
	if err != nil {
		return nil, "", err
	}
	if len(pos) != 1 {
		return nil, "", fmt.Errorf("%w: want one session ID", errUsage)
	}
	if !events.ValidSessionID(pos[0]) {
		return nil, "", fmt.Errorf("%w: session ID %q must be 1-200 letters, digits, '-' or '_'", errUsage, pos[0])
	}
	return nf, pos[0], nil
}

// sessionHistory is what session show prints: the record, every message
// (summarised ones marked with summarised_by) and every compaction.
type sessionHistory struct {
	Record      session.Record    `json:"record"`
	Messages    []session.Message `json:"messages"`
	Compactions []session.Message `json:"compactions"`
}

func sessionShow(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("session show", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, _ jetstream.JetStream, sessions *kvstore.Sessions, _ *kvstore.Breakers) error {
		rec, err := sessions.Record(ctx, sid)
		if err != nil {
			return err
		}
		msgs, comps, err := sessions.History(ctx, sid)
		if err != nil {
			return err
		}
		if comps == nil {
			comps = []session.Message{}
		}
		return printJSON(stdout, sessionHistory{Record: rec, Messages: msgs, Compactions: comps})
	})
}

func sessionContext(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("session context", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, _ jetstream.JetStream, sessions *kvstore.Sessions, _ *kvstore.Breakers) error {
		v, err := api.Context(ctx, sessions, config.Defaults().Models, sid)
		if err != nil {
			return err
		}
		return printJSON(stdout, v)
	})
}
