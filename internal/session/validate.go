package session

import (
	"fmt"
	"unicode/utf8"
)

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
