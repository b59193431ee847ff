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
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/compactor/compactor/client"
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
		{"tenant", "list the tenants the store holds sessions for, and show one's usage (as an operator)", runTenant},
		{"demo", "everything on one machine: a real conversation compacted as it grows, before and after", runDemo},
		{"provision", "create the streams, buckets and consumer on a NATS server (as an admin)", runProvision},
		{"migrate", "move sessions of the first store layout (bucket sessions) into the sharded one (resumable, as an admin)", runMigrate},
		{"nats", "run only the embedded NATS server with JetStream (for the nats CLI, tools and benchmarks)", runNATS},
		{"health", "probe the service's /readyz (or a URL): exit 0 when it answers 2xx (a container healthcheck)", runHealth},
		{"bench", "measure overhead and throughput against the JetStream floor, model cost, scale; write docs/BENCHMARKS.md", runBench},
		{"chaos", "kill a stream leader and a replica under load on a three-node cluster; check nothing is lost or done twice; write docs/RELIABILITY.md", runChaos},
		{"eval", "replay data through the runtime loop (replay, probes, compare-ladder, compare-prepared, drift, recall): compactions, model cost, retention", runEval},
		{"mcp", "serve the recall tools (search_history, expand_history) for a session as an MCP server, over stdio or streamable HTTP", runMCP},
		{"gateway", "serve the OpenAI and Anthropic APIs in front of the service: agents that only take a base URL get compacted contexts", runGateway},
		{"standin", "a stand-in model of the OpenAI and Anthropic APIs (scripted, no key) to try the gateway and agents with", runStandin},
		{"contract", "print the public contract: subjects, event types, streams, codes, the session-id rule, limits (--json for clients)", runContract},
		{"version", "print the version (also --version)", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintf(stdout, "compactor %s (%s)\n", buildVersion(), runtime.Version())
			return err
		}},
	}
}

// version is stamped at build: go build -ldflags "-X main.version=v1.2.3"
// (make build does, from git describe). Without it, the version Go stamps
// from the module or its VCS tag and commit is used.
var version = ""

// buildVersion is the version this binary reports.
func buildVersion() string {
	if version != "" {
		return version
	}
	dev := "v" + client.Version + "-dev"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return dev
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ".dirty"
			}
		}
	}
	if rev != "" {
		return dev + "+" + rev[:min(12, len(rev))] + dirty
	}
	return dev
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"}
	}
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
			if err != errFailed { // it says what failed
				fmt.Fprintf(stderr, "compactor %s: %v\n", c.name, err)
			}
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
	fmt.Fprintln(w, "\nRun 'compactor <command> --help' for a command's flags. Every flag can also be set")
	fmt.Fprintln(w, "in the environment as COMPACTOR_<FLAG> (--nats-url: also NATS_URL); flags win over")
	fmt.Fprintln(w, "the environment, and the environment over the --config file.")
}
