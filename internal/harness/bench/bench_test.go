package bench

import (
	"context"
	"encoding/xml"
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// A small run of every measure but the LoCoMo replay: the service answers,
// the floor answers, the figures are positive and the report renders.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and the service")
	}
	rep, err := Run(context.Background(), Options{Sizes: []int{40, 60}, Iterations: 4, Concurrency: []int{1, 4}, ThroughputRequests: 8,
		ScaleSizes: []int{60, 240}, DriftCases: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Overhead) != 2 || len(rep.Throughput) != 2 || len(rep.Scale) != 2 || len(rep.ModelCost) != 0 {
		t.Fatalf("rows: %+v", rep)
	}
	for _, o := range rep.Overhead {
		if o.Floor.P50 <= 0 || o.EndToEnd.P50 <= o.Model.P50 || o.RatioP50 <= 0 || o.Samples != 4 {
			t.Fatalf("overhead row %+v", o)
		}
	}
	for _, tr := range rep.Throughput {
		if tr.Service <= 0 || tr.Instant <= 0 || tr.Floor <= 0 {
			t.Fatalf("throughput row %+v", tr)
		}
	}
	if s := rep.Scale[1]; s.Millis <= 0 || s.Tokens <= rep.Scale[0].Tokens || s.LLMCalls < 1 {
		t.Fatalf("scale row %+v", s)
	}
	md := rep.Markdown("BENCHMARKS.svg")
	for _, want := range []string{"## 1. Overhead", "## 2. Throughput", "## 3. Model cost", "skipped", "## 4. Scale", "![", "## 9. Drift", "Against the thresholds"} {
		if !strings.Contains(md, want) {
			t.Fatalf("report lacks %q:\n%s", want, md)
		}
	}
	if err := xml.Unmarshal([]byte(rep.SVG()), new(struct{})); err != nil {
		t.Fatalf("the chart is not well-formed SVG: %v", err)
	}
}

func TestSessionOf(t *testing.T) {
	for _, n := range []int{1, 50, 200} {
		msgs, err := sessionOf(n)
		if err != nil || len(msgs) != n {
			t.Fatalf("sessionOf(%d): %d messages, %v", n, len(msgs), err)
		}
	}
	// Cycling renames the calls: no id occurs more often in 200 messages
	// than in one pass over the run (62 messages).
	count := func(msgs []session.Message) map[string]int {
		n := map[string]int{}
		for _, m := range msgs {
			for _, c := range m.ToolCalls {
				n[c.ID]++
			}
		}
		return n
	}
	once, _ := sessionOf(62)
	long, _ := sessionOf(200)
	perPass, all := count(once), count(long)
	if len(all) <= len(perPass) {
		t.Fatalf("%d distinct call ids in 200 messages, %d in one pass", len(all), len(perPass))
	}
	for id, n := range all {
		if base := id[:strings.LastIndex(id, "_")]; n > perPass[base+"_0"] {
			t.Fatalf("call id %s occurs %d times, %d in one pass", id, n, perPass[base+"_0"])
		}
	}
}

// instantModel answers the instant summary at once: what is left is the
// pipeline's own work.
type instantModel struct{}

func (instantModel) Summarize(context.Context, pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	return pipeline.SummaryResponse{Text: instantSummary, Model: "instant"}, nil
}

// BenchmarkCompactLadder is one compaction of the bench's session, in
// process with an instant model, with the ladder and with summary only:
// the cost of clearing beside that of summarising.
func BenchmarkCompactLadder(b *testing.B) {
	c, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{50, 1000} {
		msgs, err := sessionOf(n)
		if err != nil {
			b.Fatal(err)
		}
		for i := range msgs {
			c.Ensure(&msgs[i])
		}
		for _, steps := range [][]string{{pipeline.StepClear, pipeline.StepSummarise}, {pipeline.StepSummarise}} {
			b.Run(fmt.Sprintf("messages=%d/%s", n, strings.Join(steps, "+")), func(b *testing.B) {
				cfg := pipeline.DefaultConfig()
				cfg.Reductions = steps
				st := memstore.New()
				svc, err := pipeline.New(st, memstore.NewBreakers(), instantModel{}, cfg)
				if err != nil {
					b.Fatal(err)
				}
				i := 0
				for b.Loop() {
					b.StopTimer()
					id := fmt.Sprint("s", i)
					i++
					if _, err := st.Create(context.Background(), session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: benchLimit}, msgs); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if res, err := svc.Compact(context.Background(), pipeline.Request{ID: id, SessionID: id, Trigger: pipeline.TriggerOverBudget}); err != nil || res.Outcome != pipeline.OutcomeCompacted {
						b.Fatalf("%v %+v", err, res)
					}
				}
			})
		}
	}
}
