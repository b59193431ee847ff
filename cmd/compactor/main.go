// Command compactor keeps LLM agent sessions inside their model's context
// window. This file only wires parts together and parses flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// errUsage marks a command-line mistake: the message is printed with a hint
// to use --help, and the exit code is 2.
var errUsage = errors.New("usage")

// errFailed marks a command that ran but whose result is a failure (exit 1,
// the result already printed).
var errFailed = errors.New("failed")

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the service (an embedded NATS server unless --nats-url)", runServe},
		{"session", "import, show and read the context of stored sessions", runSession},
		{"compact", "compact a stored session through the service, or a conversation --file in-process", runCompact},
		{"breaker", "list, show and reset sessions' circuit breakers", runBreaker},
		{"demo", "everything on one machine: a real conversation compacted as it grows, before and after", runDemo},
		{"provision", "create the streams, buckets and consumer on a NATS server (as an admin)", runProvision},
		{"bench", "measure overhead and throughput against the JetStream floor, model cost, scale; write docs/BENCHMARKS.md", runBench},
		{"chaos", "kill a stream leader and a replica under load on a three-node cluster; check nothing is lost or done twice; write docs/RELIABILITY.md", runChaos},
		{"eval", "replay a data folder through the runtime loop; report compactions, model cost, retention", runEval},
		{"version", "print the version", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintln(stdout, version)
			return err
		}},
	}
}

var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errHelp):
			return 0
		case errors.Is(err, errFailed):
			return 1
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "compactor %s: %v\nRun 'compactor %s --help' for usage.\n", c.name, err, c.name)
			return 2
		default:
			fmt.Fprintf(stderr, "compactor %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "compactor: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: compactor <command> [flags] [args]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'compactor <command> --help' for a command's flags.")
}
