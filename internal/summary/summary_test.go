package summary_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/summary"
)

func full() *summary.Summary {
	s := summary.New()
	s.Add(summary.Goal, "Book JFK to SEA on 2024-05-20")
	s.Add(summary.Facts, "Reservation ZX81Q costs $451")
	return s
}

func TestRenderParseRoundTrip(t *testing.T) {
	text := full().Render()
	for _, h := range summary.Headings {
		if !strings.Contains(text, "## "+h+"\n") {
			t.Fatalf("heading %q missing from\n%s", h, text)
		}
	}
	s, found := summary.Parse(text)
	if len(found) != len(summary.Headings) || s.Bullets() != 2 || s.Sections[summary.Facts][0] != "Reservation ZX81Q costs $451" {
		t.Fatalf("round trip lost data: %+v", s.Sections)
	}
	if s.Render() != text {
		t.Fatal("render(parse(x)) != x")
	}
}

func TestParseTolerant(t *testing.T) {
	text := "**Goal:**\n* fix the bug\n  in parser.go\n# user instructions\n• never push to main\n## Unknown\n- dropped\n"
	s, found := summary.Parse(text)
	if !found[summary.Goal] || !found[summary.Instructions] {
		t.Fatalf("headings not recognised: %v", found)
	}
	if got := s.Sections[summary.Goal]; len(got) != 1 || got[0] != "fix the bug in parser.go" {
		t.Fatalf("continuation line not joined: %q", got)
	}
	if s.Bullets() != 2 {
		t.Fatalf("bullets under an unknown heading kept: %d", s.Bullets())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		text string
		want error
	}{
		{"valid", full().Render(), nil},
		{"empty", "  \n", summary.ErrEmpty},
		{"refusal", "I'm sorry, but I can't summarise this.", summary.ErrNotSummary},
		{"error body", `{"error": {"message": "rate limited"}}`, summary.ErrNotSummary},
		{"missing headings", "## Goal\n- x\n", summary.ErrMissingHeadings},
		{"only none", summary.New().Render(), summary.ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := summary.Validate(tt.text)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	delta := summary.New()
	delta.Add(summary.Facts, "Reservation ZX81Q costs $451") // duplicate
	delta.Add(summary.Facts, "Refund of $120 issued")
	delta.Add(summary.OpenTasks, "Confirm the seat")
	base := full()
	m := summary.Merge(base, delta)
	if got := m.Sections[summary.Facts]; len(got) != 2 || got[1] != "Refund of $120 issued" {
		t.Fatalf("facts after merge: %q", got)
	}
	if len(base.Sections[summary.Facts]) != 1 {
		t.Fatal("Merge changed its input")
	}
	if len(m.Sections[summary.OpenTasks]) != 1 || m.Sections[summary.Goal][0] != "Book JFK to SEA on 2024-05-20" {
		t.Fatalf("merge lost sections: %+v", m.Sections)
	}
}
