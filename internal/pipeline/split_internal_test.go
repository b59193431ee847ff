package pipeline

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// A giant message whose split by tokens leaves a piece of blank lines: the
// piece is dropped, since a chunk of nothing has no summary (the extractive
// model answers none, and the compaction failed). Found by
// TestPropertyCompaction.
func TestSplitMessageDropsBlankPieces(t *testing.T) {
	c, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	s := &summariser{counter: c}
	const budget = 100
	n := max(budget-c.Message(&session.Message{Role: session.RoleTool}), budget/2)
	// Find a text whose split ends in a blank piece (the precondition).
	var text string
	for k := 1; k < 400 && text == ""; k++ {
		cand := strings.Repeat("invoice INV-2291 paid ", k) + "\n"
		if p := c.Split(cand, n); len(p) > 1 && strings.TrimSpace(p[len(p)-1]) == "" {
			text = cand
		}
	}
	if text == "" {
		t.Fatal("no text splits into a trailing blank piece: the test lost its precondition")
	}
	pieces := s.splitMessage(session.Message{Role: session.RoleTool, ToolCallID: "x", Content: session.TextContent(text)}, budget)
	for i, p := range pieces {
		if strings.TrimSpace(p.Content.Text) == "" {
			t.Fatalf("piece %d of %d is blank", i, len(pieces))
		}
	}
	if got := pieces[len(pieces)-1].Content.Text; !strings.Contains(got, "INV-2291") {
		t.Fatalf("last piece %q", got)
	}
}
