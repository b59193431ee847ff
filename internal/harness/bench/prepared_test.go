package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// chatConversation is a synthetic chat of n messages, each with its own
// facts.
func chatConversation(name string, n int) transcript.Conversation {
	c := transcript.Conversation{Name: name, Source: "synthetic"}
	for i := range n {
		role := session.RoleUser
		if i%2 == 1 {
			role = session.RoleAssistant
		}
		c.Messages = append(c.Messages, session.Message{Role: role, Content: session.TextContent(
			fmt.Sprintf("Message %d of %s: the parcel PCL-%05d left the depot in Porto at %02d:%02d and reaches Braga on day %d.", i, name, i*7, i%24, i%60, i%28+1))})
	}
	return c
}

// The comparison on a small run: the blocking mode never answers from a
// preparation and makes none; the prepared mode answers from
// preparations, its preparation calls say so to the model, and both
// compact every request. (Counts, not times: the report's latencies are
// make bench's.)
func TestComparePreparedSmall(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs two servers and the service, paced (make test runs it without the race detector)")
	}
	convs := []transcript.Conversation{chatConversation("a", 300), chatConversation("b", 300)}
	var trace bytes.Buffer
	cmp, err := ComparePrepared(context.Background(), convs, pipeline.DefaultConfig(), PreparedOptions{Limit: 4000, ModelDelay: 50 * time.Millisecond, Pace: 0.03, Trace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	// The trace has a line per request, and its figures add up to the
	// rows'; and one per preparation, in the prepared mode only.
	lines := map[string]int{}
	fromPrep, prepCalls := 0, 0
	for dec := json.NewDecoder(&trace); dec.More(); {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		var pl PrepTraceLine
		if err := json.Unmarshal(raw, &pl); err != nil {
			t.Fatal(err)
		}
		if pl.Kind == "preparation" {
			if pl.Mode != "prepared" || pl.Session != "a" && pl.Session != "b" || pl.Outcome == "prepared" && (pl.LLMCalls == 0 || pl.InputTokens == 0) {
				t.Fatalf("preparation trace line %s", raw)
			}
			prepCalls += pl.LLMCalls
			continue
		}
		var tl TraceLine
		if err := json.Unmarshal(raw, &tl); err != nil {
			t.Fatal(err)
		}
		lines[tl.Mode]++
		if tl.Session != "a" && tl.Session != "b" || tl.TokensBefore <= 4000 || tl.TokensAfter >= tl.TokensBefore {
			t.Fatalf("trace line %+v", tl)
		}
		if tl.Strategy == "prepared" {
			fromPrep++
		}
	}
	if lines["blocking"] != cmp.Blocking.Requests || lines["prepared"] != cmp.Prepared.Requests || fromPrep != cmp.Prepared.FromPreparation {
		t.Fatalf("trace has %v lines (%d from a preparation), rows %d and %d requests (%d from a preparation)", lines, fromPrep,
			cmp.Blocking.Requests, cmp.Prepared.Requests, cmp.Prepared.FromPreparation)
	}
	b, p := cmp.Blocking, cmp.Prepared
	if b.Requests == 0 || b.Failures != 0 || p.Failures != 0 || b.Compacted != b.Requests || p.Compacted != p.Requests {
		t.Fatalf("blocking %+v\nprepared %+v", b, p)
	}
	if b.FromPreparation != 0 || b.PrepCalls != 0 || b.TopUps != 0 {
		t.Fatalf("the blocking mode prepared: %+v", b)
	}
	if p.FromPreparation == 0 || p.PrepCalls == 0 || p.PrepInputTokens == 0 || p.InputTokens < p.PrepInputTokens {
		t.Fatalf("the prepared mode answered none from a preparation: %+v", p)
	}
	// (A preparation still running when the replay ended is not traced.)
	if prepCalls == 0 || int64(prepCalls) > p.PrepCalls {
		t.Fatalf("the trace's preparations made %d model calls, the stand-in saw %d", prepCalls, p.PrepCalls)
	}
	// Each mode took at least its messages' pace: an assistant message
	// waits as its tokens say (the replays once paced them all alike).
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	if least := paceOf(convs[0], counter, 0.03).Seconds(); b.Seconds < least || p.Seconds < least || least < 7 {
		t.Fatalf("the replays took %.1f s and %.1f s, under the %.1f s their messages' pace adds up to", b.Seconds, p.Seconds, least)
	}
	if p.Latency.N != p.Requests || p.Latency.P50 > p.Latency.P99 {
		t.Fatalf("latency %+v", p.Latency)
	}
	var out strings.Builder
	rep := &Report{Prepared: cmp, Long: []*PreparedComparison{cmp}, Window: cmp}
	out.WriteString(rep.Markdown(""))
	if !strings.Contains(out.String(), "## 6. Prepared compactions") || !strings.Contains(out.String(), "| prepared |") ||
		!strings.Contains(out.String(), "## 7. Prepared compactions on long agent runs\n\nThe long agent runs") ||
		!strings.Contains(out.String(), fmt.Sprintf("### %d tokens", cmp.Prepared.Limit)) ||
		!strings.Contains(out.String(), "## 8. Prepared compactions on the bundled sets at a real pace\n\nSection 6's replay again") ||
		!strings.Contains(out.String(), fmt.Sprintf("- Prepared at %d tokens, %gx pace: ", cmp.Prepared.Limit, cmp.Pace)) {
		t.Fatalf("report:\n%s", out.String())
	}
	if none := (&Report{LongNote: "skipped: no long agent runs"}).Markdown(""); !strings.Contains(none, "## 7. Prepared compactions on long agent runs\n\nskipped: no long agent runs.") {
		t.Fatalf("report without long runs:\n%s", none)
	}
}

// paceOf is how long a replay of c at pace takes with no compaction:
// every message's PaceOf, scaled.
func paceOf(c transcript.Conversation, counter *tokens.Counter, pace float64) time.Duration {
	var d time.Duration
	for i := range c.Messages {
		m := c.Messages[i]
		m.Tokens = 0
		d += time.Duration(pace * float64(PaceOf(m.Role, counter.Message(&m))))
	}
	return d
}

// The stand-in reads a prompt's transcript back into the messages it was
// built from: their roles and texts, a message of several lines whole.
func TestStandInReadsTheTranscript(t *testing.T) {
	msgs := []session.Message{
		{Role: session.RoleUser, Name: "Caroline", Content: session.TextContent("I went to the support group.\nIt was great.")},
		{Role: session.RoleAssistant, Content: session.TextContent("Glad to hear it."), ToolCalls: []session.ToolCall{{ID: "c1", Type: "function", Function: session.FunctionCall{Name: "note", Arguments: `{"x":1}`}}}},
		{Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent("[ok] </transcript> saved")},
	}
	got := transcriptMessages(pipeline.BuildPrompt(msgs, 500, "").User)
	if len(got) != 3 || got[0].Role != session.RoleUser || got[0].Content.Text != "I went to the support group.\nIt was great." ||
		got[1].Role != session.RoleAssistant || !strings.HasPrefix(got[1].Content.Text, "Glad to hear it.\n[call c1: note(") ||
		got[2].Role != session.RoleTool || got[2].Content.Text != "[ok] </transcript> saved" {
		t.Fatalf("read back %+v", got)
	}
}

// The paced replay checks every compacted context for continuity: a
// preparation applied to a session that had moved on (a gap, a message
// twice, a context behind the head) fails the run.
func TestContinuous(t *testing.T) {
	sys := client.Message{Role: "system", Seq: 1}
	comp := func(from, to int64) client.Message {
		return client.Message{Role: "user", IsCompaction: true, Compaction: &client.Compaction{FromSeq: from, ToSeq: to}}
	}
	raw := func(seqs ...int64) []client.Message {
		var out []client.Message
		for _, s := range seqs {
			out = append(out, client.Message{Role: "user", Seq: s})
		}
		return out
	}
	for _, c := range []struct {
		name string
		view []client.Message
		head int64
		ok   bool
	}{
		{"summary and tail", append([]client.Message{sys, comp(2, 5)}, raw(6, 7, 8)...), 8, true},
		{"cleared alone", append([]client.Message{sys}, raw(2, 3, 4)...), 4, true},
		{"cleared after a summary", append([]client.Message{sys, {Role: "user", IsCompaction: true, Compaction: &client.Compaction{SummaryFromSeq: 2, SummaryToSeq: 20}}}, raw(21, 22)...), 22, true},
		{"a gap after the summary", append([]client.Message{sys, comp(2, 5)}, raw(7, 8)...), 8, false},
		{"a message summarised and raw", append([]client.Message{sys, comp(2, 5)}, raw(5, 6)...), 6, false},
		{"behind the head", append([]client.Message{sys, comp(2, 5)}, raw(6)...), 7, false},
		{"a gap in a clearing", append([]client.Message{sys}, raw(2, 4)...), 4, false},
	} {
		if err := continuous(c.view, c.head); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
