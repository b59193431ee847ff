package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/compactor/compactor/internal/harness/bench"
)

// runRecall is eval recall: what a search finds of what the replays'
// final contexts summarised, and search latency through the endpoint;
// the run as JSON, and as Markdown in --out. Exit 1 when a goal of issue
// 46 is missed.
func (f *evalFlags) runRecall(ctx context.Context, enc *json.Encoder, lims []int, pw io.Writer) error {
	o := bench.RecallOptions{Data: f.data, Limit: lims[0], Progress: pw, Queries: f.queries}
	if f.quick {
		o.Sizes, o.Queries = []int{500, 2000}, 40
	}
	run, err := bench.RunRecall(ctx, o)
	if err != nil {
		return err
	}
	if err := enc.Encode(run); err != nil {
		return err
	}
	if f.out != "" {
		if err := bench.WriteRecall(f.out, run); err != nil {
			return err
		}
	}
	if !run.Met() {
		var missed []string
		for _, g := range run.Goals() {
			if strings.HasSuffix(g, "**missed**") {
				missed = append(missed, strings.TrimSuffix(g, ": **missed**"))
			}
		}
		return fmt.Errorf("%w: recall goals missed: %s", errFailed, strings.Join(missed, "; "))
	}
	return nil
}
