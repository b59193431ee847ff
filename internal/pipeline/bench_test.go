package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// counted returns chat(turns) with token counts set, as an import leaves it.
func counted(tb testing.TB, turns int) []session.Message {
	c := counter(tb)
	msgs := chat(turns)
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	return msgs
}

func BenchmarkSelect(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		msgs := counted(b, n/4)[1:]
		b.Run(fmt.Sprintf("messages=%d", len(msgs)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pipeline.Select(pipeline.SelectInput{Candidates: msgs, KeepRecentTurns: 4, TailBudget: 2000, MaxTailMessages: 49})
			}
		})
	}
}

// BenchmarkCompact is one whole in-memory compaction (extractive summary)
// of a fresh session: load, count check, select, chunk, summarise, verify,
// commit. Importing the session is outside the timer.
func BenchmarkCompact(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		msgs := counted(b, n/4)
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			e := newEnv(b, nil, pipeline.DefaultConfig())
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				id := fmt.Sprint("s", i)
				i++
				e.importSession(b, id, 8000, msgs)
				b.StartTimer()
				res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: id, SessionID: id, Trigger: pipeline.TriggerOverBudget})
				if err != nil || res.Outcome != pipeline.OutcomeCompacted {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}

// BenchmarkCompactIncremental is the next compaction of an already
// compacted session after 40 new messages: its cost should not depend on
// how long the session's history is.
func BenchmarkCompactIncremental(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		msgs := counted(b, n/4)
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			e := newEnv(b, nil, pipeline.DefaultConfig())
			e.importSession(b, "s", 8000, msgs[:n+1])
			compact(b, e, "s", pipeline.TriggerOverBudget)
			next := n + 1
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				batch := counted(b, 10)[1:]
				e.store.Append(context.Background(), "s", batch...)
				next += len(batch)
				b.StartTimer()
				res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprint(next), SessionID: "s", Trigger: pipeline.TriggerOverflow})
				if err != nil || res.Outcome != pipeline.OutcomeCompacted {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}

// meter is a summariser wrapper that measures the bytes its inner
// summariser tokenised.
type meter struct {
	next  pipeline.Summarizer
	bytes int64
}

func (m *meter) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	before := tokens.EncodedBytes()
	resp, err := m.next.Summarize(ctx, r)
	m.bytes += tokens.EncodedBytes() - before
	return resp, err
}

// TestSecondCompactionDoesNotRetokenise: once messages are counted, a later
// compaction tokenises only what is new (its summary, the new messages),
// never the history again.
func TestSecondCompactionDoesNotRetokenise(t *testing.T) {
	m := &meter{next: extractive.New(counter(t))}
	e := newEnv(t, m, pipeline.DefaultConfig())
	msgs := counted(t, 500)
	var historyBytes int64
	for _, msg := range msgs {
		historyBytes += int64(len(msg.Content.Text))
	}
	e.importSession(t, "s", 8000, msgs)
	before := tokens.EncodedBytes()
	compact(t, e, "s", pipeline.TriggerOverBudget)
	first, firstSum := tokens.EncodedBytes()-before, m.bytes

	batch := counted(t, 10)[1:]
	var newBytes int64
	for _, msg := range batch {
		newBytes += int64(len(msg.Content.Text))
	}
	e.store.Append(context.Background(), "s", batch...)
	before, m.bytes = tokens.EncodedBytes(), 0
	res := compact(t, e, "s", pipeline.TriggerOverflow)
	second, secondSum := tokens.EncodedBytes()-before, m.bytes
	if res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("second compaction: %+v", res)
	}
	t.Logf("history %d bytes, %d new: first compaction tokenised %d bytes in the pipeline, %d in the extractive summariser; second %d and %d",
		historyBytes, newBytes, first-firstSum, firstSum, second-secondSum, secondSum)
	// The pipeline itself counts only the new summary and compaction
	// message (a few KB); the history is 140 KB.
	if second-secondSum > 16<<10 {
		t.Fatalf("the second compaction's pipeline tokenised %d bytes; the summary is at most a few KB", second-secondSum)
	}
	if second > historyBytes/4 {
		t.Fatalf("the second compaction tokenised %d bytes in all, against a %d-byte history", second, historyBytes)
	}
}
