package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactor/compactor/contract"
)

// RunTool runs a recall tool call (contract.RecallTools: search_history or
// expand_history) that a model made in session sessionID, and answers the
// text of its tool result, within contract.MaxToolResultChars. A runtime
// that runs its tools itself offers the model contract.OpenAITools() or
// contract.AnthropicTools() and passes each such call here. Arguments the
// service refuses come back as an *Error (code 400), for the model to be
// told.
func (c *Client) RunTool(ctx context.Context, sessionID, name string, args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	switch name {
	case contract.ToolSearchHistory:
		var a contract.SearchHistoryArgs
		if err := dec.Decode(&a); err != nil {
			return "", &Error{Subject: contract.SubjectSearch, Code: 400, Message: "search_history's arguments: " + err.Error()}
		}
		ans, err := c.Search(ctx, a.Search(sessionID))
		if err != nil {
			return "", err
		}
		return RenderSearch(ans), nil
	case contract.ToolExpandHistory:
		var a contract.ExpandHistoryArgs
		if err := dec.Decode(&a); err != nil {
			return "", &Error{Subject: contract.SubjectExpand, Code: 400, Message: "expand_history's arguments: " + err.Error()}
		}
		page, err := c.Expand(ctx, a.Expand(sessionID))
		if err != nil {
			return "", err
		}
		return RenderExpanded(page), nil
	}
	return "", fmt.Errorf("client: no recall tool %q (the tools are %s and %s)", name, contract.ToolSearchHistory, contract.ToolExpandHistory)
}

// RenderSearch is a search's answer as a model reads it: each hit's
// snippet, its messages by #seq, role and state.
func RenderSearch(a contract.SearchAnswer) string {
	var b strings.Builder
	if len(a.Hits) == 0 {
		fmt.Fprintf(&b, "No message of the history matches %q.", a.Query)
		return b.String()
	}
	fmt.Fprintf(&b, "%d hits for %q in the history (messages #1 to #%d):\n", len(a.Hits), a.Query, a.HeadSeq)
	for i, h := range a.Hits {
		fmt.Fprintf(&b, "\n[%d] ", i+1)
		if h.SessionID != "" && h.SessionID != a.SessionID {
			fmt.Fprintf(&b, "session %s, ", h.SessionID)
		}
		fmt.Fprintf(&b, "#%d, %s", h.Seq, h.State)
		switch {
		case h.CompactionID != "" && h.SessionID != "" && h.SessionID != a.SessionID:
			fmt.Fprintf(&b, " (expand_history session_id=%s compaction_id=%s)", h.SessionID, h.CompactionID)
		case h.CompactionID != "":
			fmt.Fprintf(&b, " (expand_history compaction_id=%s)", h.CompactionID)
		}
		b.WriteString(":\n")
		for _, p := range h.Snippet {
			fmt.Fprintf(&b, "#%d %s%s: %s\n", p.Seq, p.Role, nameOf(p.Name), oneLine(p.Text))
		}
		if b.Len() > contract.MaxToolResultChars {
			fmt.Fprintf(&b, "\n(%d more hits left out: ask for fewer, or a narrower range)\n", len(a.Hits)-i-1)
			break
		}
	}
	return b.String()
}

// RenderExpanded is a page of an expand as a model reads it: each message
// whole by #seq, role and state, and where the next page starts.
func RenderExpanded(e Expanded) string {
	var b strings.Builder
	if len(e.Messages) == 0 && len(e.Omitted) == 0 {
		return "No stored message there."
	}
	next := e.Next
	for i, m := range e.Messages {
		line := fmt.Sprintf("#%d %s%s [%s]: %s\n", m.Seq, m.Role, nameOf(m.Name), stateAt(e.States, i), messageText(&m))
		if b.Len()+len(line) > contract.MaxToolResultChars && i > 0 {
			next = e.Messages[i-1].Seq
			break
		}
		b.WriteString(line)
	}
	for _, seq := range e.Omitted {
		fmt.Fprintf(&b, "#%d is over one answer: read it with compactor.session.message\n", seq)
	}
	if next != 0 {
		fmt.Fprintf(&b, "(more: call expand_history again with the same arguments and after=%d)\n", next)
	}
	return b.String()
}

func stateAt(states []contract.MessageState, i int) contract.MessageState {
	if i < len(states) {
		return states[i]
	}
	return ""
}

// messageText is m's text with its tool calls ("name(arguments)"), and a
// tool result's call.
func messageText(m *Message) string {
	var parts []string
	if m.ToolCallID != "" {
		parts = append(parts, "(result of "+m.ToolCallID+")")
	}
	if t := m.Content.Text; t != "" {
		parts = append(parts, t)
	}
	for _, tc := range m.ToolCalls {
		parts = append(parts, fmt.Sprintf("%s(%s) [call %s]", tc.Function.Name, tc.Function.Arguments, tc.ID))
	}
	return strings.Join(parts, " ")
}

func nameOf(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}

// oneLine folds a snippet's line breaks, so that each message is a line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
