package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// A Shape varies a paced replay away from the conversations as they were
// recorded (issue 45: preparations must hold on any session, not on the
// bundled ones' pace and sizes): it rewrites the conversations and scales
// each message's delay. The replay's --pace still applies on top (1: a
// real agent loop; 0.2: five times faster).
type Shape struct {
	Name string `json:"name"`
	// About says what the shape does, for the report.
	About string `json:"about"`
	// rewrite changes a conversation (nil: as recorded).
	rewrite func(c transcript.Conversation, counter *tokens.Counter, limit int) transcript.Conversation
	// factor scales message i's delay (nil: 1).
	factor func(i int) float64
}

// Shapes are the shapes a varied replay runs, by name.
var Shapes = []Shape{
	{Name: "recorded", About: "the conversations as recorded"},
	{Name: "big-observations", About: "every sixth tool output (or text action's observation) grown to 30 % of the window, as a 10,000-token file read at 32k",
		rewrite: bigObservations},
	{Name: "bursts", About: "bursts of twelve messages at a tenth of their pace after each idle of 40 steps' time", factor: bursts},
	{Name: "slow", About: "every step five times slower (a model or a person taking their time)", factor: func(int) float64 { return 5 }},
}

// ShapeNamed returns the shape called name.
func ShapeNamed(name string) (Shape, error) {
	var names []string
	for _, s := range Shapes {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Shape{}, fmt.Errorf("unknown shape %q (want one of %s)", name, strings.Join(names, ", "))
}

// apply rewrites convs for limit.
func (s Shape) apply(convs []transcript.Conversation, counter *tokens.Counter, limit int) []transcript.Conversation {
	if s.rewrite == nil {
		return convs
	}
	out := make([]transcript.Conversation, len(convs))
	for i, c := range convs {
		out[i] = s.rewrite(c, counter, limit)
	}
	return out
}

// delay is message i's delay under the shape.
func (s Shape) delay(i int, d time.Duration) time.Duration {
	if s.factor == nil {
		return d
	}
	return time.Duration(s.factor(i) * float64(d))
}

// bursts: 12 messages at a tenth of their pace, then one that waits as
// long as 40 ordinary steps would (an agent idle, then catching up).
func bursts(i int) float64 {
	switch {
	case i%13 == 12:
		return 40
	default:
		return 0.1
	}
}

// bigObservations grows every sixth observation — a tool result, or the
// user message that answers an assistant's text action — to 30 % of the
// window, repeating its own lines (a long file or log, as the agent's
// tool would print it).
func bigObservations(c transcript.Conversation, counter *tokens.Counter, limit int) transcript.Conversation {
	out := c
	out.Messages = make([]session.Message, len(c.Messages))
	copy(out.Messages, c.Messages)
	want, seen := limit*3/10, 0
	for i := range out.Messages {
		m := &out.Messages[i]
		observation := m.Role == session.RoleTool || m.Role == session.RoleUser && i > 0 && out.Messages[i-1].Role == session.RoleAssistant &&
			ledger.ShellBlock(out.Messages[i-1].Content.Text) != ""
		if !observation || strings.TrimSpace(m.Content.Text) == "" {
			continue
		}
		if seen++; seen%6 != 0 {
			continue
		}
		text := m.Content.Text
		n := counter.Count(text)
		if n >= want {
			continue
		}
		var sb strings.Builder
		sb.WriteString(text)
		for k := 1; n < want; k++ {
			block := fmt.Sprintf("\n[%d] %s", k, text)
			sb.WriteString(block)
			n += counter.Count(block)
		}
		m.Content = session.TextContent(sb.String())
		m.Tokens = 0
	}
	return out
}
