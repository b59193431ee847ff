package session

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxIDBytes bounds a message id a runtime gives.
const MaxIDBytes = 256

// Validate checks a chat message as a runtime sent it: a known role, valid
// UTF-8, tool results that name their call, and tool calls with ids. It
// returns an error wrapping ErrInvalid that says which field is wrong.
func (m *Message) Validate() error {
	if !m.Role.Valid() {
		return fmt.Errorf("%w: role %q is not system, user, assistant or tool", ErrInvalid, m.Role)
	}
	if !utf8.ValidString(m.Content.Text) || !utf8.ValidString(m.Name) {
		return fmt.Errorf("%w: content is not valid UTF-8", ErrInvalid)
	}
	if len(m.ID) > MaxIDBytes || !utf8.ValidString(m.ID) {
		return fmt.Errorf("%w: id must be valid UTF-8 of at most %d bytes", ErrInvalid, MaxIDBytes)
	}
	if m.Role == RoleTool && m.ToolCallID == "" {
		return fmt.Errorf("%w: tool message without tool_call_id", ErrInvalid)
	}
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return fmt.Errorf("%w: tool_calls on a %s message", ErrInvalid, m.Role)
	}
	for i, tc := range m.ToolCalls {
		if tc.ID == "" {
			return fmt.Errorf("%w: tool_calls[%d] has no id", ErrInvalid, i)
		}
		if !utf8.ValidString(tc.Function.Arguments) || !utf8.ValidString(tc.Function.Name) {
			return fmt.Errorf("%w: tool_calls[%d] is not valid UTF-8", ErrInvalid, i)
		}
	}
	return nil
}

// Prepare validates a create's or an append's messages, gives each an id
// (id(i) for one that came without) and its seq after head, and clears the
// fields only a store sets. Ids must be unique within the call. Every store
// prepares messages with it.
func Prepare(msgs []Message, head int64, id func(i int) string) ([]Message, error) {
	out := make([]Message, len(msgs))
	seen := make(map[string]bool, len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if m.ID == "" {
			m.ID = id(i)
		}
		if seen[m.ID] {
			return nil, fmt.Errorf("%w: message %d: id %q given twice", ErrInvalid, i, m.ID)
		}
		seen[m.ID] = true
		m.Seq = head + int64(i) + 1
		m.IsCompaction, m.Compaction, m.SummarisedBy = false, nil, ""
		out[i] = m
	}
	return out, nil
}

// SameAs reports whether m says what o says: the same role, content, name,
// tool calls and tool call id. Ids, seqs, counts and the fields a store
// sets are not compared. An append that repeats a stored message's id is a
// repeat when they are the same, and a conflict otherwise.
func (m *Message) SameAs(o *Message) bool {
	if m.Role != o.Role || !m.Content.Equal(o.Content) || m.Name != o.Name || m.ToolCallID != o.ToolCallID || len(m.ToolCalls) != len(o.ToolCalls) {
		return false
	}
	for i, a := range m.ToolCalls {
		b := o.ToolCalls[i]
		if a.ID != b.ID || a.Function != b.Function || callType(a.Type) != callType(b.Type) {
			return false
		}
	}
	return true
}

func callType(t string) string {
	if t == "" {
		return "function"
	}
	return t
}

// CheckToolResults returns an error wrapping ErrInvalid for the first tool
// message of msgs that answers no call: the nearest message before it that
// is not a tool message must be an assistant message with a tool call of
// its tool_call_id, as every provider requires. Only the messages for which
// check(i) is true are checked (an append's new ones); before returns the
// nearest such message stored ahead of msgs (nil when there is none) and
// is called only when a check needs it.
func CheckToolResults(msgs []Message, check func(i int) bool, before func() (*Message, error)) error {
	var last *Message
	fetched := false
	for i := range msgs {
		m := &msgs[i]
		if m.Role != RoleTool {
			last = m
			continue
		}
		if !check(i) {
			continue
		}
		if last == nil && !fetched {
			var err error
			if last, err = before(); err != nil {
				return err
			}
			fetched = true
		}
		if answers(last, m.ToolCallID) {
			continue
		}
		what := "no message precedes it"
		switch {
		case last == nil:
		case last.Role != RoleAssistant || len(last.ToolCalls) == 0:
			what = fmt.Sprintf("the message before it is a %s message without tool calls", last.Role)
		default:
			ids := make([]string, len(last.ToolCalls))
			for j, tc := range last.ToolCalls {
				ids[j] = strconv.Quote(tc.ID)
			}
			what = "the assistant message before it calls " + strings.Join(ids, ", ")
		}
		return fmt.Errorf("%w: message %d: tool result for call %q answers no call: %s (a tool result follows the assistant message that made its call)", ErrInvalid, i, m.ToolCallID, what)
	}
	return nil
}

// answers reports whether m is an assistant message with a tool call id.
func answers(m *Message, id string) bool {
	if m == nil || m.Role != RoleAssistant {
		return false
	}
	for _, tc := range m.ToolCalls {
		if tc.ID == id {
			return true
		}
	}
	return false
}

// CheckConversation is CheckToolResults for a whole conversation, as a
// create gives it: every tool message must answer a call before it.
func CheckConversation(msgs []Message) error {
	return CheckToolResults(msgs, func(int) bool { return true }, func() (*Message, error) { return nil, nil })
}
