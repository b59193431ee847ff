package eval_test

import (
	"testing"

	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

func TestMeasure(t *testing.T) {
	c := transcript.Conversation{
		DiaIndex: map[string]int{"D1:1": 0, "D1:2": 1, "D2:1": 2},
		QA: []transcript.QA{
			{Question: "What did Caroline research?", Answer: "Adoption agencies", Evidence: []string{"D1:1"}, Category: 1},
			{Question: "Where?", Answer: "Sweden", Evidence: []string{"D1:2"}, Category: 4},
			{Question: "Later?", Answer: "camping", Evidence: []string{"D2:1"}, Category: 4},              // not summarised
			{Question: "Adversarial", Answer: "x", Evidence: []string{"D1:1"}, Category: 5},               // category left out
			{Question: "Irregular", Answer: "Sweden", Evidence: []string{"D1:2; D9:9", "D"}, Category: 2}, // irregular ids
		},
	}
	summarised := func(i int) bool { return i < 2 }
	units := []string{"- Caroline: researching adoption agencies this week", "- Melanie: went camping"}
	r := eval.Measure(c, summarised, units)
	if r.Eligible != 3 || r.Kept != 1 {
		t.Fatalf("Measure = %+v, want 3 eligible, 1 kept", r)
	}
	// Words of one answer spread over two units do not count.
	r = eval.Measure(c, summarised, []string{"adoption", "agencies"})
	if r.Kept != 0 {
		t.Fatalf("answer split across units counted: %+v", r)
	}
}

func TestBaselines(t *testing.T) {
	counter, _ := tokens.ForEncoding("o200k_base")
	var msgs []session.Message
	for range 200 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Name: "Ann", Content: session.TextContent("a line of words about nothing in particular")})
	}
	msgs[0].Content = session.TextContent("first fact: Sweden")
	msgs[199].Content = session.TextContent("last fact: camping")
	first, last := eval.Baselines(counter, msgs, 100)
	if first[0] != "Ann: first fact: Sweden" || last[len(last)-2] != "Ann: last fact: camping" {
		t.Fatalf("first %q, last %q", first[0], last[len(last)-2])
	}
}
