package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/compactor/compactor/internal/quota"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

const tenantUsage = `  compactor tenant list
  compactor tenant show NAME`

// runTenant is `compactor tenant`: an operator's view of the tenants the
// store holds sessions for (run as admin or compactor: it reads the store).
func runTenant(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand("tenant", map[string]func(context.Context, []string, io.Writer) error{
		"list": tenantList, "show": tenantShow,
	}, tenantUsage)(ctx, args, stdout, stderr)
}

func tenantList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tenant list", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	pos, err := parseFlags(fs, args, stdout, "tenant list")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		all, err := st.kv.Tenants(ctx)
		if err != nil {
			return err
		}
		return printJSON(stdout, all)
	})
}

// tenantShow prints one tenant's usage, with its open breakers and its
// model use this hour; a tenant with no sessions shows zeros.
func tenantShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tenant show", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	pos, err := parseFlags(fs, args, stdout, "tenant show NAME")
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one tenant NAME (its NATS account; %q for the default tenant)", errUsage, tenant.Default)
	}
	name := pos[0]
	if name != tenant.Default {
		if err := tenant.Check(name); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	return withStores(ctx, nf, func(ctx context.Context, st stores) error {
		all, err := st.kv.Tenants(ctx)
		if err != nil {
			return err
		}
		u := session.TenantUsage{Tenant: name}
		for _, t := range all {
			if t.Tenant == name {
				u = t
			}
		}
		breakers, err := st.breakers.List(tenant.With(ctx, name))
		if err != nil {
			return err
		}
		open := 0
		for _, b := range breakers {
			if b.Open() {
				open++
			}
		}
		u.BreakersOpen = &open
		// The model use its hourly quotas count (kept while it has one).
		h, err := st.kv.AddHour(ctx, name, time.Now().UTC().Truncate(time.Hour), 0, 0)
		if err != nil {
			return err
		}
		out := struct {
			session.TenantUsage
			ModelUse *quota.Hour `json:"model_use_this_hour,omitempty"`
		}{TenantUsage: u}
		if h.Calls > 0 || h.Tokens > 0 {
			out.ModelUse = &h
		}
		return printJSON(stdout, out)
	})
}
