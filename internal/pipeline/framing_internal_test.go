package pipeline

import (
	"fmt"
	"math"
	"testing"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// The framing a compaction message puts around its summary (the preamble
// with the widest seqs, the message's own overhead, a token the join may
// add) is within summaryFraming in every encoding, and within framingOf
// its last seq (the plan's reserve), so a summary within what either
// leaves of max_summary_tokens makes a message within it. Seqs of every
// width: a range's first seq has no more digits than its last.
func TestFramingWithinItsReserve(t *testing.T) {
	summaries := []string{"", "## Goal\n- fix the build", "##Goal\n\n- x", "\n\n## Working state\n- task: ship it\n\n## Files\n- read: a.go"}
	for _, enc := range []string{"cl100k_base", "o200k_base"} {
		c, err := tokens.ForEncoding(enc)
		if err != nil {
			t.Fatal(err)
		}
		for _, seqs := range [][2]int64{{1, 2}, {9, 10}, {123456, 987654}, {math.MaxInt64 - 1, math.MaxInt64}} {
			for _, s := range summaries {
				m := session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf(summaryPreamble, seqs[0], seqs[1]) + s)}
				if framing := c.Message(&m) - c.Count(s); framing > summaryFraming {
					t.Errorf("%s, seqs %v: the framing takes %d tokens, over the %d reserved", enc, seqs, framing, summaryFraming)
				}
			}
		}
	}
}
