package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/compactor/compactor/internal/bench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	data := fs.String("data", "../shared/data", "data `DIR` with locomo/ for the model-cost replay (skipped when absent)")
	out := fs.String("out", "docs/BENCHMARKS.md", "write the report to this Markdown `FILE` and its chart beside it (empty: print JSON only)")
	iters := fs.Int("iterations", 40, "compactions per session length for the overhead percentiles")
	requests := fs.Int("requests", 128, "compactions per concurrency level for the throughput")
	quick := fs.Bool("quick", false, "a short run: 10 iterations, 32 requests, scale up to 2,000 messages")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE`")
	pos, err := parseFlags(fs, args, stdout, "bench [--data DIR] [--out FILE]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
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
