package extractive_test

import (
	"context"
	"fmt"
	"regexp"
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

// named is a message of a named speaker.
func named(role session.Role, name, text string) session.Message {
	m := msg(role, text)
	m.Name = name
	return m
}

func summarise(t *testing.T, msgs []session.Message, max int) *summary.Summary {
	t.Helper()
	s, _ := newSummarizer(t)
	resp, err := s.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskSummarise, Messages: msgs, MaxTokens: max})
	if err != nil {
		t.Fatal(err)
	}
	if err := summary.Validate(resp.Text); err != nil {
		t.Fatalf("%v\n%s", err, resp.Text)
	}
	parsed, _ := summary.Parse(resp.Text)
	return parsed
}

// The goal is the task asked for, not a greeting; instructions are
// imperative requests, not encouragement or compliments; small talk goes.
func TestGoalAndInstructions(t *testing.T) {
	msgs := []session.Message{
		msg(session.RoleUser, "Hi there! Can you help me migrate the billing service to Postgres 16? Please always run the linter before committing."),
		msg(session.RoleAssistant, "Sure, that sounds great!"),
		msg(session.RoleUser, "Don't worry about the old dashboards. You must have worked really hard on the schema. Never change the public API of billing.Client."),
		msg(session.RoleAssistant, "Thanks! The migration needs pg_dump 16.2 and a maintenance window on 2024-06-02."),
		msg(session.RoleUser, "Haha nice. Also keep the invoices table read-only during the copy."),
	}
	s := summarise(t, msgs, 400)
	if g := strings.Join(s.Sections[summary.Goal], " "); !strings.Contains(g, "migrate the billing service to Postgres 16") || strings.Contains(g, "Hi there") {
		t.Fatalf("goal %q", g)
	}
	inst := strings.Join(s.Sections[summary.Instructions], "\n")
	for _, want := range []string{"Please always run the linter before committing.", "Never change the public API of billing.Client."} {
		if !strings.Contains(inst, want) {
			t.Errorf("instruction %q missing from %q", want, inst)
		}
	}
	for _, not := range []string{"Don't worry", "worked really hard"} {
		if strings.Contains(inst, not) {
			t.Errorf("%q is not an instruction: %q", not, inst)
		}
	}
	all := strings.Join(append(append(s.Sections[summary.Facts], s.Sections[summary.Decisions]...), s.Sections[summary.OpenTasks]...), "\n")
	if strings.Contains(all, "sounds great") || strings.Contains(all, "Haha nice") {
		t.Errorf("small talk kept: %q", all)
	}
}

// A conversation between people gets sections that fit it: who talks,
// what they said by date, written as notes with relative times resolved,
// their plans; no instructions, no errors.
func TestConversationBetweenPeople(t *testing.T) {
	msgs := []session.Message{
		named(session.RoleUser, "Caroline", "(1:56 pm on 8 May, 2023) Hey Mel! Good to see you! I went to a LGBTQ support group yesterday and it was so powerful."),
		named(session.RoleAssistant, "Melanie", "Wow, that's cool, Caroline! I painted a lake sunrise last year, it's special to me."),
		named(session.RoleUser, "Caroline", "You must have worked really hard for that. Don't worry, you got this!"),
		named(session.RoleAssistant, "Melanie", "I'm going to run a charity race for mental health next month. We all need a timeout! Our family motto is 'Bring it on Home' and we live by it."),
		named(session.RoleUser, "Caroline", "(7:55 pm on 25 May, 2023) Last Friday I researched adoption agencies; I can't wait to be a mom."),
	}
	s := summarise(t, msgs, 400)
	if g := s.Sections[summary.Goal]; len(g) != 1 || g[0] != "Conversation between Caroline and Melanie" {
		t.Fatalf("goal %q", g)
	}
	if n := len(s.Sections[summary.Instructions]) + len(s.Sections[summary.Errors]) + len(s.Sections[summary.Files]); n != 0 {
		t.Fatalf("sections that do not fit a conversation: %+v", s.Sections)
	}
	facts := strings.Join(s.Sections[summary.Facts], "\n")
	for _, want := range []string{
		"8 May 2023: Caroline: Went LGBTQ support group 7 May 2023 powerful.", // "yesterday" is the date it means
		"Melanie: Painted lake sunrise 2022",
		"Family motto 'Bring it on Home' live by it.", // a quotation stays as written
		// A time counted from the line's date leaves the date to the line.
		"25 May 2023: Caroline: Friday before researched adoption agencies",
	} {
		if !strings.Contains(facts, want) {
			t.Errorf("facts lack %q:\n%s", want, facts)
		}
	}
	if n := strings.Count(s.Sections[summary.Facts][0], "Caroline:"); n != 1 {
		t.Errorf("a date's line names each speaker once, not %d times: %q", n, s.Sections[summary.Facts][0])
	}
	if d := strings.Join(s.Sections[summary.Decisions], "\n"); !strings.Contains(d, "Going run charity race for mental health June 2023") || !strings.Contains(d, "Can't wait to be mom") {
		t.Errorf("decisions %q", d)
	}
}

// A clause becomes a note: no subject, interjection, filler or addressee,
// and the words a reader restores go; quotations and "to be" stay.
func TestTighten(t *testing.T) {
	vocative := regexp.MustCompile(`,\s*(?:Sam|Evan)\s*([.!?…]+|$)`)
	for _, c := range []struct{ in, want string }{
		{"Wow, I just got back from a trip with my family in my new Prius.", "Got back from trip with family in new Prius."},
		{"That's great news, Sam!", "That's great news!"},
		{"My son had a soccer accident and it was tough.", "Son had soccer accident tough."},
		{"I can\u2019t wait to be a dad.", "Can't wait to be dad."},
		{`We hung a sign that says "Bring it on Home" in the hall.`, `Hung sign says "Bring it on Home" in hall.`},
		{"Oh, okay!", ""},
	} {
		if got := extractive.Tighten(c.in, vocative); got != c.want {
			t.Errorf("Tighten(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Condensing a conversation's summary keeps its form: dated bullets, each
// sentence with its speaker.
func TestCondenseConversation(t *testing.T) {
	var msgs []session.Message
	for d := 1; d <= 6; d++ {
		msgs = append(msgs, named(session.RoleUser, "Sam", fmt.Sprintf("(9:00 am on %d June, 2023) I ran %d miles in the Riverside park yesterday.", d*3, d+2)),
			named(session.RoleAssistant, "Evan", fmt.Sprintf("I bought a %d-speed bike for the Banff trip. My sister Ana visited from Lisbon.", d+20)))
	}
	s := summarise(t, msgs, 600)
	text := s.Render()
	sm, c := newSummarizer(t)
	resp, err := sm.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskCondense, MaxTokens: 150,
		Messages: []session.Message{{Role: session.RoleAssistant, Content: session.TextContent(text), IsCompaction: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Count(resp.Text); n > 150 {
		t.Fatalf("condensed to %d tokens", n)
	}
	parsed, _ := summary.Parse(resp.Text)
	if len(parsed.Sections[summary.Facts]) == 0 {
		t.Fatalf("nothing kept:\n%s", resp.Text)
	}
	for _, b := range parsed.Sections[summary.Facts] {
		if !regexp.MustCompile(`^\d{1,2} June 2023: (Sam|Evan): `).MatchString(b) || strings.Contains(b, "; :") {
			t.Errorf("bullet lost its form: %q", b)
		}
	}
}

// A chat between people stored without names reads as one (short,
// unstructured replies, no system prompt); a chat with an assistant
// model, or an agent's session, does not.
func TestCasualChat(t *testing.T) {
	chat := func(reply string, system bool) []session.Message {
		var out []session.Message
		if system {
			out = append(out, session.Message{Role: session.RoleSystem, Content: session.TextContent("You are a helpful assistant.")})
		}
		for i := range 6 {
			out = append(out, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("How was day %d?", i))},
				session.Message{Role: session.RoleAssistant, Content: session.TextContent(reply)})
		}
		return out
	}
	people := "Pretty good! We went hiking by the lake and the kids loved it."
	model := "Here is a plan for the day:\n\n1. Hike by the lake.\n2. Have lunch.\n\n- Bring water\n- Bring snacks"
	long := strings.Repeat("It went well and there is a lot to say about it. ", 12)
	for _, c := range []struct {
		name string
		msgs []session.Message
		want bool
	}{
		{"people", chat(people, false), true},
		{"a model's structured replies", chat(model, false), false},
		{"a model's long replies", chat(long, false), false},
		{"a system prompt", chat(people, true), false},
		{"too short to tell", chat(people, false)[:4], false},
	} {
		if got := extractive.CasualChat(c.msgs); got != c.want {
			t.Errorf("%s: casual %v, want %v", c.name, got, c.want)
		}
	}
}

// A budget the headings nearly fill still gets a bullet: the most
// informative sentence, clipped to the room left, never a summary with
// nothing in it (the pipeline refuses one as no summary, and a chunk of
// one tool result at a 200-token summary failed so; found by
// TestPropertyCompaction).
func TestTinyBudgetKeepsABullet(t *testing.T) {
	s, c := newSummarizer(t)
	m := session.Message{Role: session.RoleTool, ToolCallID: "x", Content: session.TextContent("JFK then HAT069 flight economy. then JFK /src/main.go ZX81Q. " +
		"2024-05-20 retry economy HAT069 timeout flight flight and economy config.yaml. HAT069 passenger refund flight retry ZX81Q /src/main.go. economy $451 retry flight the economy")}
	for _, budget := range []int{80, 100, 122, 200} {
		r, err := s.Summarize(context.Background(), pipeline.SummaryRequest{Task: pipeline.TaskSummarise, Messages: []session.Message{m}, MaxTokens: budget})
		if err != nil {
			t.Fatal(err)
		}
		if err := summary.Validate(r.Text); err != nil || c.Count(r.Text) > budget || !strings.Contains(r.Text, "HAT069") {
			t.Fatalf("budget %d: %v, %d tokens:\n%s", budget, err, c.Count(r.Text), r.Text)
		}
	}
}
