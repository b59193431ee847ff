package session

import (
	"fmt"
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
