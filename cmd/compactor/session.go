package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/config"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
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
  compactor session context ID
  compactor session message ID SEQ
  compactor session delete ID
  compactor session list [--limit N] [--after CURSOR] [--prefix P] [--model M] [--idle-for D] [--compacted true|false]`

func runSession(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand("session", map[string]func(context.Context, []string, io.Writer) error{
		"import": sessionImport, "show": sessionShow, "context": sessionContext, "message": sessionMessage, "delete": sessionDelete, "list": sessionList,
	}, sessionUsage)(ctx, args, stdout, stderr)
}

// opTimeout bounds a CLI command's store operations.
const opTimeout = 2 * time.Minute

func sessionImport(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("session import", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	nf.addTenantFlag(fs)
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
	if *id != "" {
		if err := contract.CheckSessionID(*id); err != nil {
			return fmt.Errorf("%w: --session-id: %v", errUsage, err)
		}
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
	if len(msgs) == 0 {
		return fmt.Errorf("%s holds no messages: nothing to import (an empty session is made with compactor.session.create, then appended to)", pos[0])
	}
	if *id == "" {
		*id = uuid.NewString()
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		out, err := sessions.New(st.kv, st.breakers, conf.Models, sessions.WithImageEstimate(conf.Compaction.ImageTokens)).Create(ctx, session.Record{SessionID: *id, Model: *model, ContextLimit: *limit}, msgs)
		if errors.Is(err, session.ErrExists) {
			return fmt.Errorf("session %s exists already with other content: choose another --session-id, or delete it first", *id)
		}
		if err != nil {
			return err
		}
		return printJSON(stdout, out)
	})
}

// sessionArg parses a verb taking one session ID.
func sessionArg(name string, args []string, stdout io.Writer) (*natsFlags, string, error) {
	nf, pos, err := sessionArgs(name, "", 1, args, stdout)
	if err != nil {
		return nil, "", err
	}
	return nf, pos[0], nil
}

// sessionArgs parses a verb taking a session ID and n-1 more arguments
// (named in more for the usage line).
func sessionArgs(name, more string, n int, args []string, stdout io.Writer) (*natsFlags, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	nf.addTenantFlag(fs)
	pos, err := parseFlags(fs, args, stdout, name+" ID"+more)
	if err != nil {
		return nil, nil, err
	}
	if len(pos) != n {
		if n == 1 {
			return nil, nil, fmt.Errorf("%w: want one session ID", errUsage)
		}
		return nil, nil, fmt.Errorf("%w: want a session ID and%s", errUsage, more)
	}
	if err := contract.CheckSessionID(pos[0]); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return nf, pos, nil
}

func sessionShow(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("session show", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		h, err := st.sessions.History(ctx, sid)
		if err != nil {
			return err
		}
		return printJSON(stdout, h)
	})
}

func sessionContext(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("session context", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		v, err := st.sessions.Context(ctx, sid)
		if err != nil {
			return err
		}
		return printJSON(stdout, v)
	})
}

// sessionMessage prints one stored message, summarised or not: the
// original of what a compaction summarised.
func sessionMessage(ctx context.Context, args []string, stdout io.Writer) error {
	nf, pos, err := sessionArgs("session message", " SEQ", 2, args, stdout)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || seq < 1 {
		return fmt.Errorf("%w: SEQ %q must be a message seq, >= 1", errUsage, pos[1])
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		m, err := st.sessions.Message(ctx, pos[0], seq)
		if err != nil {
			return err
		}
		return printJSON(stdout, m)
	})
}

// sessionDelete removes every trace of a session: its messages,
// compactions and breaker. Deleting one that does not exist answers the
// same.
func sessionDelete(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("session delete", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		out, err := st.sessions.Delete(ctx, sid)
		if err != nil {
			return err
		}
		return printJSON(stdout, out)
	})
}

// sessionList prints a page of the stored sessions and the cursor of the
// next ({"sessions", "next"}); --after that cursor prints the next page.
func sessionList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("session list", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	nf.addTenantFlag(fs)
	var opt session.ListOptions
	fs.IntVar(&opt.Limit, "limit", session.DefaultPageSize, fmt.Sprintf("sessions in the page, at most %d", session.MaxPageSize))
	fs.StringVar(&opt.After, "after", "", "the `CURSOR` a previous page answered as \"next\"")
	fs.StringVar(&opt.Prefix, "prefix", "", "only sessions whose id starts with `P`")
	fs.StringVar(&opt.Model, "model", "", "only sessions of `MODEL`")
	fs.DurationVar(&opt.IdleFor, "idle-for", 0, "only sessions nobody wrote to for at least `D` (e.g. 24h)")
	compacted := fs.String("compacted", "", "only sessions compacted at least once (true) or never (false)")
	pos, err := parseFlags(fs, args, stdout, "session list")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *compacted != "" {
		b, err := strconv.ParseBool(*compacted)
		if err != nil {
			return fmt.Errorf("%w: --compacted %q: true or false", errUsage, *compacted)
		}
		opt.Compacted = &b
	}
	if err := opt.Check(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		page, err := st.sessions.List(ctx, opt)
		if err != nil {
			return err
		}
		return printJSON(stdout, page)
	})
}
