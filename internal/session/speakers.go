package session

import (
	"regexp"
	"slices"
	"strings"
)

// reSpeakerPrefix is a chat message that opens with its speaker's name
// ("Caroline: I went to ...").
var reSpeakerPrefix = regexp.MustCompile(`^([A-Z][\w'.-]*(?: [A-Z][\w'.-]*){0,2}): +(\S[\s\S]*)$`)

// WithSpeakerNames reads a chat between people that writes each speaker
// into the text ("Name: ...", no name field) as if the names were in the
// name field: the same conversation, summarised the same way. It applies
// only where there are no tools, at least two speakers open their
// messages so, and nine in ten of the messages do; msgs is returned as it
// is otherwise (and never changed).
func WithSpeakerNames(msgs []Message) []Message {
	var names []string
	said, prefixed := 0, 0
	for i := range msgs {
		m := &msgs[i]
		if len(m.ToolCalls) > 0 || m.Role == RoleTool {
			return msgs
		}
		if m.IsCompaction || m.Name != "" || (m.Role != RoleUser && m.Role != RoleAssistant) || strings.TrimSpace(m.Content.Text) == "" {
			continue
		}
		said++
		if g := reSpeakerPrefix.FindStringSubmatch(m.Content.Text); g != nil && !labels[strings.ToLower(g[1])] {
			prefixed++
			if !slices.Contains(names, g[1]) {
				names = append(names, g[1])
			}
		}
	}
	if len(names) < 2 || len(names) > 8 || prefixed*10 < said*9 {
		return msgs
	}
	out := slices.Clone(msgs)
	for i := range out {
		m := &out[i]
		if m.IsCompaction || m.Name != "" {
			continue
		}
		if g := reSpeakerPrefix.FindStringSubmatch(m.Content.Text); g != nil && !labels[strings.ToLower(g[1])] {
			m.Name, m.Content = strings.ReplaceAll(g[1], " ", "_"), TextContent(g[2])
		}
	}
	return out
}

// labels open a line the way a speaker's name does but name no one: the
// roles of a chat with an assistant, and headings.
var labels = map[string]bool{"user": true, "assistant": true, "system": true, "human": true, "ai": true, "bot": true, "q": true, "a": true,
	"note": true, "update": true, "edit": true, "fixed": true, "error": true, "warning": true, "info": true, "step": true, "answer": true,
	"question": true, "summary": true, "result": true, "output": true, "input": true, "example": true, "tip": true, "todo": true, "done": true}
