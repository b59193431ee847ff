package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
)

const breakerUsage = `  compactor breaker list [--limit N] [--after CURSOR]
  compactor breaker show ID
  compactor breaker reset ID | --all`

func runBreaker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand("breaker", map[string]func(context.Context, []string, io.Writer) error{
		"list": breakerList, "show": breakerShow, "reset": breakerReset,
	}, breakerUsage)(ctx, args, stdout, stderr)
}

func breakerList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("breaker list", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	nf.addTenantFlag(fs)
	limit := fs.Int("limit", 0, fmt.Sprintf("print one page of at most `N` breakers (at most %d) and the cursor of the next: {\"breakers\", \"next\"} (default: every breaker, as an array)", session.MaxPageSize))
	after := fs.String("after", "", "print the page after `CURSOR` (a previous page's \"next\")")
	pos, err := parseFlags(fs, args, stdout, "breaker list")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *limit < 0 || *limit > session.MaxPageSize {
		return fmt.Errorf("%w: --limit %d: 1 to %d", errUsage, *limit, session.MaxPageSize)
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		if *limit > 0 || *after != "" {
			page, err := st.breakers.Page(ctx, *after, *limit)
			if err != nil {
				return err
			}
			return printJSON(stdout, page)
		}
		list, err := st.breakers.List(ctx)
		if err != nil {
			return err
		}
		if list == nil {
			list = []session.Breaker{}
		}
		return printJSON(stdout, list)
	})
}

func breakerShow(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("breaker show", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		b, err := st.breakers.Breaker(ctx, sid)
		if err != nil {
			return err
		}
		if b.Revision == 0 { // no breaker stored: closed, if the session exists
			if _, err := st.kv.Record(ctx, sid); errors.Is(err, session.ErrNotFound) {
				return fmt.Errorf("session %s not found: no such session and no breaker", sid)
			} else if err != nil {
				return err
			}
		}
		return printJSON(stdout, b)
	})
}

// breakerReset closes the breaker in KV (one session's, or with --all
// every stored one, as an operator does after an outage) and, for each that
// was open, publishes CompactionCircuitClosed; it works whether or not the
// service runs.
func breakerReset(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("breaker reset", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	nf.addTenantFlag(fs)
	all := fs.Bool("all", false, "reset every stored breaker")
	pos, err := parseFlags(fs, args, stdout, "breaker reset ID | --all")
	if err != nil {
		return err
	}
	switch {
	case *all && len(pos) > 0:
		return fmt.Errorf("%w: give a session ID or --all, not both", errUsage)
	case !*all && len(pos) != 1:
		return fmt.Errorf("%w: want one session ID, or --all", errUsage)
	case !*all && contract.CheckSessionID(pos[0]) != nil:
		return fmt.Errorf("%w: %v", errUsage, contract.CheckSessionID(pos[0]))
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		svc := sessions.New(st.kv, st.breakers, nil)
		pub := &events.Publisher{JS: st.js, Source: cliSource}
		if *all {
			out, err := api.ResetAll(ctx, svc, pub, st.breakers, nil)
			if err != nil {
				return fmt.Errorf("reset breakers (%d reset): %w", len(out.Reset), err)
			}
			return printJSON(stdout, out)
		}
		sid := pos[0]
		prev, err := events.ResetBreaker(ctx, svc, pub, sid)
		if err != nil {
			return fmt.Errorf("reset breaker of %s: %w", sid, err)
		}
		return printJSON(stdout, api.ResetAnswer{SessionID: sid, WasOpen: prev.Open(), Previous: prev})
	})
}
