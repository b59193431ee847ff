package pipeline

import (
	"fmt"
	"strings"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
)

// VerifyInput is a compaction's before and after.
type VerifyInput struct {
	Before, After []session.Message
	Pinned        []session.Message
	// BeforeTokens and AfterTokens are the two contexts' counts.
	BeforeTokens, AfterTokens int
	Limit                     int
	// Summary says the after context has a summary (a compaction that only
	// cleared tool results before any summary has none).
	Summary bool
	// MessageTokens is the count of the compaction message this
	// compaction writes (its preamble and summary; 0 when it writes none
	// and keeps the one in force word for word), and MaxSummaryTokens
	// its bound.
	MessageTokens    int
	MaxSummaryTokens int
	// State is the working state the summary must hold, bullet for
	// bullet, under its heading.
	State []string
}

// Verify checks the context a compaction would produce, and returns an
// error wrapping ErrInvariant for the first broken invariant:
//   - the pinned messages lead the context, in order;
//   - exactly one compaction message follows them (none when no summary
//     is in force yet);
//   - no tool result is in the context without its call, when the call was
//     in the context before (a result orphaned in the input stays as it was);
//   - no tool call is in the context without its result, when the result was
//     in the context before;
//   - the compaction message written is within max_summary_tokens and the
//     context within its limit;
//   - the summary holds the working state it was given, every bullet;
//   - the context is smaller than it was: a compaction never makes it
//     bigger.
func Verify(in VerifyInput) error {
	after := in.After
	summaries := 0
	if in.Summary {
		summaries = 1
	}
	if len(after) < len(in.Pinned)+summaries {
		return fmt.Errorf("%w: context has %d messages, fewer than the %d pinned plus the summary", ErrInvariant, len(after), len(in.Pinned))
	}
	for i := range in.Pinned {
		if after[i].ID != in.Pinned[i].ID {
			return fmt.Errorf("%w: pinned message seq %d is not at position %d", ErrInvariant, in.Pinned[i].Seq, i)
		}
	}
	compactions := 0
	for i := range after {
		if after[i].IsCompaction {
			compactions++
			if i != len(in.Pinned) {
				return fmt.Errorf("%w: the compaction message is at position %d, not right after the pinned messages", ErrInvariant, i)
			}
		}
	}
	if compactions != summaries {
		return fmt.Errorf("%w: context has %d compaction messages, want %d", ErrInvariant, compactions, summaries)
	}
	if len(in.State) > 0 {
		have := map[string]bool{}
		if summaries == 1 {
			s, _ := summary.Parse(SummaryText(&after[len(in.Pinned)]))
			for _, b := range s.Sections[summary.State] {
				have[b] = true
			}
		}
		for _, b := range in.State {
			if !have[strings.TrimSpace(strings.ReplaceAll(b, "\n", " "))] {
				return fmt.Errorf("%w: the summary lost the working state's %q", ErrInvariant, b)
			}
		}
	}

	// Pairs as they were before; orphans of the input stay as they were.
	callOf, want := ToolPairs(in.Before)
	inAfter := make(map[string]bool, len(after))
	for i := range after {
		inAfter[after[i].ID] = true
	}
	got := map[ToolCall]int{}
	for i := range after {
		if c, ok := callOf[after[i].ID]; ok {
			if !inAfter[c.MessageID] {
				return fmt.Errorf("%w: tool result %s kept without its call", ErrInvariant, c.CallID)
			}
			got[c]++
		}
	}
	for i := range after {
		for _, tc := range after[i].ToolCalls {
			c := ToolCall{MessageID: after[i].ID, CallID: tc.ID}
			if got[c] != want[c] {
				return fmt.Errorf("%w: tool call %s kept with %d of its %d results", ErrInvariant, tc.ID, got[c], want[c])
			}
		}
	}
	if in.MessageTokens > in.MaxSummaryTokens {
		return fmt.Errorf("%w: the compaction message has %d tokens, over max_summary_tokens %d", ErrInvariant, in.MessageTokens, in.MaxSummaryTokens)
	}
	if in.AfterTokens > in.Limit {
		return fmt.Errorf("%w: context would have %d tokens, over its limit %d", ErrInvariant, in.AfterTokens, in.Limit)
	}
	if in.BeforeTokens > 0 && in.AfterTokens >= in.BeforeTokens {
		return fmt.Errorf("%w: context would have %d tokens, not fewer than the %d it had", ErrInvariant, in.AfterTokens, in.BeforeTokens)
	}
	return nil
}

// ContextOf returns what the model sees for a loaded session: the pinned
// messages, the latest summary (when one is in force), then the raw tail,
// with the tool results the compactions cleared shown as placeholders.
// Placeholders have no token count yet (Tokens is zero).
func ContextOf(s *session.Session) []session.Message {
	pinned, tail := splitPinned(s, false)
	out := make([]session.Message, 0, len(pinned)+1+len(tail))
	out = append(out, pinned...)
	if hasSummary(s.Summary) {
		out = append(out, *s.Summary)
	}
	return append(out, applyCleared(tail, clearedOf(s.Summary), "")...)
}

// hasSummary reports whether a compaction message has a summary in force.
func hasSummary(m *session.Message) bool {
	return m != nil && (m.Compaction == nil || m.Compaction.HasSummary())
}

// clearedOf returns the messages a compaction keeps cleared.
func clearedOf(m *session.Message) []session.Cleared {
	if m == nil || m.Compaction == nil {
		return nil
	}
	return m.Compaction.Cleared
}

// splitPinned separates a loaded session's raw messages into the pinned ones
// and the rest. After the first compaction the record says which seqs are
// pinned; before it, the leading system messages are, and the first user
// message too when keepFirstUser is set.
func splitPinned(s *session.Session, keepFirstUser bool) (pinned, rest []session.Message) {
	msgs := s.Messages
	if s.Record.CompactionID != "" {
		set := make(map[int64]bool, len(s.Record.PinnedSeqs))
		for _, seq := range s.Record.PinnedSeqs {
			set[seq] = true
		}
		for i := range msgs {
			if set[msgs[i].Seq] {
				pinned = append(pinned, msgs[i])
			} else {
				rest = append(rest, msgs[i])
			}
		}
		return pinned, rest
	}
	i := 0
	for i < len(msgs) && msgs[i].Role == session.RoleSystem {
		i++
	}
	if keepFirstUser && i < len(msgs) && msgs[i].Role == session.RoleUser {
		i++
	}
	return msgs[:i:i], msgs[i:]
}
