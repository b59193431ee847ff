package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/harness/chaos"
	"github.com/compactor/compactor/internal/pipeline"
)

// runChaos is `compactor chaos`: a three-node cluster, two serve replicas
// (this binary), runtimes writing and requesting while leaders and a
// replica are killed, the model is down and a replica is paused; it checks
// what the runtimes were told against what is stored and writes
// docs/RELIABILITY.md. Exit 1 when a goal is missed, naming it.
func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	runtimes := fs.Int("runtimes", 50, "runtimes writing at once (with --noisy: tenant B's, default 8)")
	duration := fs.Duration("duration", time.Minute, "`DURATION` of the load; the faults happen within it")
	failRate := fs.Float64("fail-rate", 0.3, "share of model calls that fail")
	outage := fs.Duration("outage", 7*time.Second, "how long the model fails every call, once")
	pause := fs.Duration("pause", 20*time.Second, "how long a replica is paused (SIGSTOP)")
	binary := fs.String("binary", "", "the compactor `BINARY` the replicas run (default: this one)")
	drain := fs.Duration("drain", 90*time.Second, "how long to wait after the load for the requests still open")
	cooldown := fs.Duration("breaker-cooldown", pipeline.DefaultBreakerCooldown, "the replicas' breaker cooldown: requests a cooldown after the model's outage must not be refused circuit_open (the load must last past it)")
	limit := fs.Int("context-limit", 2500, "every session's context limit in `TOKENS`: a runtime requests a compaction past it")
	out := fs.String("out", "docs/RELIABILITY.md", "write the report to this Markdown `FILE` (empty: print JSON only)")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	keep := fs.Bool("keep", false, "keep the run's stores and the replicas' logs (the progress says where)")
	noisy := fs.Bool("noisy", false, "run the noisy-neighbour check instead: tenant B's compactions alone and beside tenant A's flood, on a server with --nats-conf's accounts (default --out docs/NOISY.md)")
	natsConf := fs.String("nats-conf", "nats.conf", "with --noisy: the nats-server configuration with the tenants' accounts")
	phase := fs.Duration("phase", 30*time.Second, "with --noisy: how long tenant B runs alone, and again beside the flood")
	flood := fs.Int("flood", 200, "with --noisy: tenant A's compaction requests per second")
	appendFlood := fs.Int("append-flood", 1000, "with --noisy: tenant A's appends per second")
	floodSpec := fs.String("tenant-a-flood", "", "(how --noisy runs tenant A's floods, each in a process of its own) send the flood the JSON `SPEC` describes as tenant A until SIGTERM, then print what it counted as JSON")
	pos, err := parseFlags(fs, args, stdout, "chaos [--runtimes N] [--duration D] [--out FILE]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *floodSpec != "" {
		return runTenantAFlood(ctx, *floodSpec, stdout)
	}
	if *runtimes < 1 || *duration < 10*time.Second || *failRate < 0 || *failRate >= 1 || *outage <= 0 || *pause <= 0 || *drain <= 0 || *limit < 500 || *cooldown <= 0 {
		return fmt.Errorf("%w: --runtimes >= 1, --duration >= 10s, 0 <= --fail-rate < 1, --outage, --pause, --drain and --breaker-cooldown > 0, --context-limit >= 500", errUsage)
	}
	if *out != "" {
		if err := checkWritable(*out); err != nil {
			return fmt.Errorf("%w: --out: %v", errUsage, err)
		}
	}
	bin := *binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	if *noisy {
		file, quiet := *out, 0 // quiet 0: the default
		if !flagSet(fs, "out") {
			file = "docs/NOISY.md"
		}
		if flagSet(fs, "runtimes") {
			quiet = *runtimes
		}
		return runNoisy(ctx, chaos.NoisyOptions{Binary: bin, NATSConf: *natsConf, Phase: *phase, Quiet: quiet, Flood: *flood, AppendFlood: *appendFlood, Progress: stderr}, file, *asJSON, args, stdout, stderr)
	}
	rep, err := chaos.Run(ctx, chaos.Options{Binary: bin, Runtimes: *runtimes, Duration: *duration, FailRate: *failRate,
		ContextLimit: *limit, Outage: *outage, Pause: *pause, Drain: *drain, BreakerCooldown: *cooldown, Keep: *keep, Progress: stderr})
	if err != nil {
		return err
	}
	if *asJSON || *out == "" {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	}
	md := rep.Markdown("compactor " + strings.Join(append([]string{"chaos"}, args...), " "))
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *out)
	}
	if !*asJSON {
		fmt.Fprint(stdout, md)
	}
	if !rep.Pass() {
		return fmt.Errorf("%w: goals missed: %s", errFailed, rep.Missed())
	}
	return nil
}

// runTenantAFlood is `compactor chaos --tenant-a-flood SPEC`: one of
// tenant A's floods for --noisy, in a process of its own.
func runTenantAFlood(ctx context.Context, specJSON string, stdout io.Writer) error {
	var spec chaos.FloodSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("%w: --tenant-a-flood: %v", errUsage, err)
	}
	res, err := chaos.RunFlood(ctx, spec)
	if err != nil {
		return err
	}
	return printJSON(stdout, res)
}

// flagSet reports whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runNoisy is `compactor chaos --noisy`.
func runNoisy(ctx context.Context, o chaos.NoisyOptions, out string, asJSON bool, args []string, stdout, stderr io.Writer) error {
	if o.Phase < 5*time.Second || o.Flood < 1 || o.AppendFlood < 1 {
		return fmt.Errorf("%w: --phase >= 5s, --flood and --append-flood >= 1", errUsage)
	}
	if out != "" {
		if err := checkWritable(out); err != nil {
			return fmt.Errorf("%w: --out: %v", errUsage, err)
		}
	}
	rep, err := chaos.RunNoisy(ctx, o)
	if err != nil {
		return err
	}
	if asJSON || out == "" {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	}
	md := rep.Markdown("compactor " + strings.Join(append([]string{"chaos"}, args...), " "))
	if out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", out)
	}
	if !asJSON {
		fmt.Fprint(stdout, md)
	}
	if !rep.Pass() {
		return fmt.Errorf("%w: a noisy-neighbour goal was missed (p99 ratios: compactions %.2f and appends %.2f beside A's requests, %.2f and %.2f beside its appends; A over its quotas: sessions %+.1f %%, bytes %+.1f %%; A's floods sent %.0f requests/s and %.0f appends/s; %d failures of tenant B, %d errors)",
			errFailed, rep.Ratio, rep.AppendRatio, rep.AppendFlood.CompactionRatio, rep.AppendFlood.AppendRatio, 100*rep.Quota.SessionsOver, 100*rep.Quota.BytesOver,
			rep.FloodRate, rep.AppendFlood.Rate, rep.QuietFailures, len(rep.Errors))
	}
	return nil
}
