package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/harness/bench"
	"github.com/compactor/compactor/internal/transcript"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	data := fs.String("data", "../shared/data", "data `DIR` with locomo/ for the model-cost replay, and (with --scale) the conversations eval replays (skipped when absent)")
	out := fs.String("out", "docs/BENCHMARKS.md", "write the report to this Markdown `FILE` and its chart beside it (empty: print JSON only)")
	iters := fs.Int("iterations", 40, "compactions per session length for the overhead percentiles")
	requests := fs.Int("requests", 128, "compactions per concurrency level for the throughput")
	quick := fs.Bool("quick", false, "a short run: 10 iterations, 32 requests, scale up to 2,000 messages")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE`")
	scale := fs.Bool("scale", false, "the scale benchmark instead: appends, storage per message, sweeps, compactions, three nodes; --out docs/SCALE.md (and scale.json beside it)")
	gw := fs.Bool("gateway", false, "the gateway benchmark instead: its added latency and first streamed byte against calling the stand-in directly, and an agent's replay past its window; --out docs/GATEWAY.md")
	pos, err := parseFlags(fs, args, stdout, "bench [--data DIR] [--out FILE] | bench --scale [--data DIR] [--quick] [--out FILE] | bench --gateway [--quick] [--out FILE]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *scale {
		return runScale(ctx, args, *data, *out, *quick, *asJSON, stdout, stderr)
	}
	if *gw {
		return runGatewayBench(ctx, args, *out, *quick, *asJSON, stdout, stderr)
	}
	if *out != "" {
		if err := checkWritable(*out); err != nil {
			return fmt.Errorf("%w: --out: %v", errUsage, err)
		}
	}
	opt := bench.Options{Data: *data, Iterations: *iters, ThroughputRequests: *requests, Progress: stderr}
	if *quick {
		opt.Iterations, opt.ThroughputRequests, opt.ScaleSizes = 10, 32, []int{200, 2000}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, opt)
	if err != nil {
		return err
	}
	rep.Command = "compactor " + strings.Join(append([]string{"bench"}, args...), " ")
	if *asJSON || *out == "" {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	}
	if *out == "" {
		return nil
	}
	chart := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".svg"
	if err := os.WriteFile(chart, []byte(rep.SVG()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(*out, []byte(rep.Markdown(filepath.Base(chart))), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s and %s\n", *out, chart)
	return nil
}

// runGatewayBench is `compactor bench --gateway`.
func runGatewayBench(ctx context.Context, args []string, out string, quick, asJSON bool, stdout, stderr io.Writer) error {
	if out != "" {
		if err := checkWritable(out); err != nil {
			return fmt.Errorf("%w: --out: %v", errUsage, err)
		}
	}
	cfg := bench.DefaultGatewayConfig()
	if quick {
		cfg.Conversations, cfg.Turns, cfg.Steps, cfg.StepDelay, cfg.SummaryDelay = 2, 20, 24, 100*time.Millisecond, 300*time.Millisecond
	}
	rep, err := bench.RunGateway(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON || out == "" {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	}
	if out != "" {
		cmd := "compactor " + strings.Join(append([]string{"bench"}, args...), " ")
		if err := os.WriteFile(out, []byte(rep.Markdown(cmd)), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", out)
	}
	if missed := rep.Missed(); len(missed) > 0 {
		fmt.Fprintf(stderr, "gateway goals missed: %s\n", strings.Join(missed, "; "))
		return errFailed
	}
	return nil
}

// checkWritable says, before a long run, whether a report can be written
// at path: its folder exists and takes a new file.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	f, err := os.CreateTemp(dir, ".compactor-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// runScale is `compactor bench --scale`: the store's scale benchmark
// against a nats-server in its own process (this binary's `nats`).
func runScale(ctx context.Context, args []string, data, out string, quick, asJSON bool, stdout, stderr io.Writer) error {
	if out != "" {
		if err := checkWritable(out); err != nil {
			return fmt.Errorf("%w: --out: %v", errUsage, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	opt := bench.ScaleOptions{Progress: stderr, Compactions: 768, Cluster: true,
		StartServer: func(ctx context.Context, dir string, sync time.Duration) (*bench.Server, error) {
			return startNATSProcess(ctx, self, dir, sync)
		}}
	// eval's replay through the service against in process, on the
	// shared data when it is there.
	convs, err := transcript.LoadDataDir(data)
	if err != nil {
		return err
	}
	if len(convs) == 0 {
		fmt.Fprintf(stderr, "no conversations under %s: eval through the service is not measured\n", data)
	}
	opt.Conversations = convs
	if quick {
		opt.AppendFor, opt.Fill, opt.Sweeps, opt.Compactions = time.Second, 2000, []int{1000, 5000}, 32
		opt.Conversations = convs[:min(len(convs), 20)]
	}
	rep, err := bench.RunScale(ctx, opt)
	if err != nil {
		return err
	}
	rep.Command = "compactor " + strings.Join(append([]string{"bench"}, args...), " ")
	if asJSON || out == "" {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	}
	if out != "" {
		js, _ := json.MarshalIndent(rep, "", "  ")
		jsonPath := filepath.Join(filepath.Dir(out), "scale.json")
		if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(out, []byte(rep.Markdown()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s and %s\n", out, jsonPath)
	}
	if missed := rep.Missed(); len(missed) > 0 {
		for _, g := range missed {
			fmt.Fprintf(stderr, "goal missed: %s: want %s, got %s\n", g.What, g.Want, g.Got)
		}
		return errFailed
	}
	return nil
}

// startNATSProcess runs `self nats` (an embedded server alone) storing
// under dir, on a free port, and waits until it accepts clients.
func startNATSProcess(ctx context.Context, self, dir string, sync time.Duration) (*bench.Server, error) {
	how := "always"
	if sync > 0 {
		how = sync.String()
	}
	cmd := exec.Command(self, "nats", "--port", "-1", "--data-dir", dir, "--sync", how)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }
	lines := bufio.NewScanner(stdout)
	urlc := make(chan string, 1)
	heaps := make(chan int64, 1)
	go func() {
		for lines.Scan() {
			if u, ok := strings.CutPrefix(lines.Text(), "ready "); ok {
				urlc <- u
			}
			if h, ok := strings.CutPrefix(lines.Text(), "heap "); ok {
				n, _ := strconv.ParseInt(h, 10, 64)
				heaps <- n
			}
		}
	}()
	heap := func(ctx context.Context) (int64, error) {
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			return 0, err
		}
		select {
		case n := <-heaps:
			return n, nil
		case <-time.After(30 * time.Second):
			return 0, errors.New("the server did not say its heap")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	select {
	case u := <-urlc:
		return &bench.Server{URL: u, PID: cmd.Process.Pid, Stop: stop, Heap: heap}, nil
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	stop()
	return nil, fmt.Errorf("the nats-server process did not start within 30 s")
}

// runNATS is `compactor nats`: the embedded nats-server with JetStream
// alone, for tools and benchmarks, until SIGINT or SIGTERM.
func runNATS(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "listen `ADDRESS`")
	port := fs.Int("port", embedded.DefaultPort, "client `PORT` (-1: any free port)")
	dataDir := fs.String("data-dir", "data", "JetStream store `DIR`")
	syncFlag := fs.String("sync", "always", "sync the store to disk after every write (always), or every `DURATION`")
	config := fs.String("config", "", "start from this nats-server configuration `FILE` (accounts, users); --host, --port, --data-dir and --sync replace its own")
	pos, err := parseFlags(fs, args, stdout, "nats [--port N] [--data-dir DIR] [--sync always|DURATION] [--config FILE]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	sync, err := parseSync("--sync", *syncFlag)
	if err != nil {
		return err
	}
	srv, err := embedded.Start(embedded.Options{Host: *host, Port: *port, DataDir: *dataDir, SyncInterval: sync, ConfigFile: *config})
	if err != nil {
		return err
	}
	defer embedded.Stop(srv)
	// SIGUSR1 asks for the live heap after a full collection (what the
	// server holds, its garbage aside): the scale benchmark's measure of
	// memory per message.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	fmt.Fprintf(stdout, "ready %s\n", srv.ClientURL())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-usr1:
			// Two collections: buffers the server pools (sync.Pool) are
			// dropped only at the second.
			runtime.GC()
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(stdout, "heap %d\n", ms.HeapAlloc)
		}
	}
}
