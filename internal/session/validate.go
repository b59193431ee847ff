package session

import (
	"fmt"
	"slices"
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
		for j := range i {
			if m.ToolCalls[j].ID == tc.ID {
				return fmt.Errorf("%w: tool_calls[%d] and tool_calls[%d] have the same id %q (each call's result names its call by id)", ErrInvalid, j, i, tc.ID)
			}
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

// CheckToolResults checks msgs' tool calls and results as every provider
// takes them, and returns an error wrapping ErrInvalid for the first
// message that breaks the rule: a tool message answers a call of the
// nearest message before it that is not a tool message (an assistant
// message with a call of its tool_call_id), and every call is answered
// before the next message that is not a tool message. Only the messages
// for which check(i) is true are checked (an append's new ones); before
// returns the nearest non-tool message stored ahead of msgs and the ids of
// its calls not answered yet (open nil: not known, so not checked); it is
// called once, when a check needs it.
func CheckToolResults(msgs []Message, check func(i int) bool, before func() (last *Message, open []string, err error)) error {
	var last *Message
	var open map[string]bool // last's calls not answered yet (nil: not known)
	fetch := func() error {
		m, o, err := before()
		if err != nil {
			return err
		}
		last = m
		if o != nil {
			open = make(map[string]bool, len(o))
			for _, id := range o {
				open[id] = true
			}
		}
		return nil
	}
	// The state before msgs, when anything is checked: the messages
	// stored ahead of the new ones (a repeat's) carry it on.
	for i := range msgs {
		if check(i) {
			if err := fetch(); err != nil {
				return err
			}
			break
		}
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Role != RoleTool {
			if check(i) && len(open) > 0 {
				ids := make([]string, 0, len(open))
				for id := range open {
					ids = append(ids, strconv.Quote(id))
				}
				slices.Sort(ids)
				return fmt.Errorf("%w: message %d: a %s message, while the tool call(s) %s of the assistant message before it have no result (every call is answered before the next message: send the results first)",
					ErrInvalid, i, m.Role, strings.Join(ids, ", "))
			}
			last = m
			open = make(map[string]bool, len(m.ToolCalls))
			for _, tc := range m.ToolCalls {
				open[tc.ID] = true
			}
			continue
		}
		if check(i) {
			if !answers(last, m.ToolCallID) {
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
		}
		delete(open, m.ToolCallID)
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
	return CheckToolResults(msgs, func(int) bool { return true }, func() (*Message, []string, error) { return nil, nil, nil })
}

// Open is the ids of msgs' calls not answered yet: those of the last
// message that is not a tool message, less the results after it.
func Open(msgs []Message) []string {
	i := len(msgs) - 1
	answered := map[string]bool{}
	for ; i >= 0 && msgs[i].Role == RoleTool; i-- {
		answered[msgs[i].ToolCallID] = true
	}
	open := []string{}
	if i >= 0 {
		for _, tc := range msgs[i].ToolCalls {
			if !answered[tc.ID] {
				open = append(open, tc.ID)
			}
		}
	}
	return open
}
