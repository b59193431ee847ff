package extractive_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
)

func newSummarizer(t *testing.T) (*extractive.Summarizer, *tokens.Counter) {
	t.Helper()
	c, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	return extractive.New(c), c
}

func msg(role session.Role, text string) session.Message {
	return session.Message{Role: role, Content: session.TextContent(text)}
}

func conversation() []session.Message {
	var out []session.Message
	out = append(out, msg(session.RoleUser, "I need to move my flight. Please always use the card ending 7447 for payments."))
	for i := range 40 {
		out = append(out,
			msg(session.RoleAssistant, "Sure, that sounds great!"),
			msg(session.RoleUser, fmt.Sprintf("Haha thanks. Also note booking REF%03d for passenger Grace Hopper departs 2024-06-%02d.", i, i%28+1)),
		)
	}
	out = append(out,
		session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Type: "function", Function: session.FunctionCall{Name: "update_reservation", Arguments: `{"reservation_id":"REF007"}`}}}},
		session.Message{Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent("Error: payment declined for card 7447\nsee /var/log/pay.log")},
		msg(session.RoleAssistant, "I decided to retry with the gift card instead."),
		msg(session.RoleUser, "Can you also add a checked bag?"),
	)
	return out
}

func TestSummaryFormatBudgetAndFacts(t *testing.T) {
	s, c := newSummarizer(t)
	for _, max := range []int{150, 400, 1000} {
		resp, err := s.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskSummarise, Messages: conversation(), MaxTokens: max})
		if err != nil {
			t.Fatal(err)
		}
		if err := summary.Validate(resp.Text); err != nil {
			t.Fatalf("max %d: %v\n%s", max, err, resp.Text)
		}
		if n := c.Count(resp.Text); n > max {
			t.Fatalf("max %d: summary has %d tokens", max, n)
		}
		parsed, _ := summary.Parse(resp.Text)
		if ins := strings.Join(parsed.Sections[summary.Instructions], " "); !strings.Contains(ins, "always use the card ending 7447") {
			t.Errorf("max %d: the user's instruction is not kept verbatim: %q", max, ins)
		}
		if max >= 400 {
			for _, want := range []string{"payment declined", "REF0", "Can you also add a checked bag?"} {
				if !strings.Contains(resp.Text, want) {
					t.Errorf("max %d: %q missing from\n%s", max, want, resp.Text)
				}
			}
		}
		if strings.Contains(resp.Text, "sounds great") {
			t.Errorf("max %d: small talk kept", max)
		}
	}
}

func TestDeterministic(t *testing.T) {
	s, _ := newSummarizer(t)
	req := pipeline.SummaryRequest{Task: pipeline.TaskSummarise, Messages: conversation(), MaxTokens: 300}
	a, _ := s.Summarize(context.Background(), req)
	b, _ := s.Summarize(context.Background(), req)
	if a.Text != b.Text {
		t.Fatal("same input, different summaries")
	}
}

func TestMergeKeepsInstructionsAndFits(t *testing.T) {
	s, c := newSummarizer(t)
	var parts []session.Message
	for i := range 5 {
		sum := summary.New()
		sum.Add(summary.Goal, "Move the flight")
		sum.Add(summary.Instructions, fmt.Sprintf("user: never book basic economy (part %d)", i))
		for j := range 30 {
			sum.Add(summary.Facts, fmt.Sprintf("booking REF%d%02d costs $%d", i, j, 100+j))
		}
		parts = append(parts, session.Message{Role: session.RoleAssistant, Content: session.TextContent(sum.Render())})
	}
	resp, err := s.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskMerge, Messages: parts, MaxTokens: 300})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Count(resp.Text); n > 300 {
		t.Fatalf("merged summary %d tokens", n)
	}
	if !strings.Contains(resp.Text, "never book basic economy (part 4)") || !strings.Contains(resp.Text, "Move the flight") {
		t.Fatalf("merge dropped the goal or instructions:\n%s", resp.Text)
	}
}

func TestEmptyInput(t *testing.T) {
	s, _ := newSummarizer(t)
	resp, err := s.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskSummarise, MaxTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Text, "## Goal") {
		t.Fatalf("no template for empty input: %q", resp.Text)
	}
}

// The answer reports its exact token count in the caller's encoding, so
// the pipeline need not count it again; without an encoding, in its own.
func TestReportsExactCountInCallersEncoding(t *testing.T) {
	s, own := newSummarizer(t)
	cl, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		enc     string
		counter *tokens.Counter
	}{{"cl100k_base", cl}, {"", own}} {
		res, err := s.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskSummarise, Messages: conversation(), MaxTokens: 300, Encoding: tc.enc})
		if err != nil {
			t.Fatal(err)
		}
		if res.Encoding != tc.counter.Encoding() || res.OutputTokens != tc.counter.Count(res.Text) || res.OutputTokens > 300 {
			t.Fatalf("encoding %q: reported %d tokens in %q, counted %d", tc.enc, res.OutputTokens, res.Encoding, tc.counter.Count(res.Text))
		}
	}
}
