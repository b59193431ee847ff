package summary_test

import (
	"testing"

	"github.com/compactor/compactor/internal/summary"
)

// FuzzParseRender: whatever a model answers, parsing never panics, and a
// parsed summary renders to text that parses back to the same bullets.
func FuzzParseRender(f *testing.F) {
	f.Add("## Goal\n- a\n## Open tasks\n- b\n")
	f.Add("**Goal:**\n* x\ncontinued\n# Unknown\n- y")
	f.Add("- orphan bullet\n##\n#\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, _ := summary.Parse(text)
		again, found := summary.Parse(s.Render())
		if len(found) != len(summary.Headings) {
			t.Fatalf("render lost headings: %v", found)
		}
		for _, h := range summary.Headings {
			if len(again.Sections[h]) != len(s.Sections[h]) {
				t.Fatalf("section %s: %d bullets, %d after a round trip", h, len(s.Sections[h]), len(again.Sections[h]))
			}
		}
		_ = summary.Validate(text)
	})
}
