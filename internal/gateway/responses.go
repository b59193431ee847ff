package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactor/compactor/client"
)

// responsesAPI is OpenAI's Responses: `input` is a string or items;
// messages and tool outputs are each one of the session's messages, the
// calls in a row one assistant message, and the items the session does not
// keep (reasoning, built-in tools' calls) go with the message after them.
var responsesAPI = &api{
	name: "responses", path: "/v1/responses", provider: "openai", list: "input",
	element:  responsesElement,
	assemble: assembleResponses,
	rebuild:  rebuildResponses,
	summary: func(text string) json.RawMessage {
		return mustJSON(map[string]any{"type": "message", "role": "user",
			"content": []map[string]string{{"type": "input_text", "text": text}}})
	},
	errorBody: openAIError,
	overflow:  openAIOverflow,
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Action    json.RawMessage `json:"action"`
	Output    json.RawMessage `json:"output"`
}

// responsesElement reads one item: a message, a call, a call's output,
// or another item (kept with the message after it).
func responsesElement(raw []byte) (*parsed, error) {
	var it responsesItem
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, err
	}
	kind := it.Type
	if kind == "" && it.Role != "" {
		kind = "message"
	}
	switch kind {
	case "function_call", "custom_tool_call", "local_shell_call":
		args := it.Arguments
		switch kind {
		case "custom_tool_call":
			args = it.Input
		case "local_shell_call":
			args, it.Name = string(it.Action), "local_shell"
		}
		return &parsed{kind: "call", call: &client.ToolCall{ID: it.CallID, Type: "function", Function: client.FunctionCall{Name: it.Name, Arguments: args}}}, nil
	case "message":
		role := it.Role
		if role == "developer" {
			role = "system"
		}
		if role != "user" && role != "assistant" && role != "system" {
			return nil, fmt.Errorf("role %q is not one of user, assistant, system, developer", it.Role)
		}
		content, err := responsesContent(it.Content)
		if err != nil {
			return nil, err
		}
		return &parsed{kind: "message", role: it.Role, msgs: []client.Message{{Role: client.Role(role), Content: content}}}, nil
	case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
		if it.CallID == "" {
			return nil, fmt.Errorf("a %s needs call_id", kind)
		}
		content, err := responsesContent(it.Output)
		if err != nil {
			return nil, fmt.Errorf("output: %v", err)
		}
		return &parsed{kind: "output", msgs: []client.Message{{Role: client.Tool, ToolCallID: it.CallID,
			Content: client.Content{Text: content.Text, Empty: content.Text == ""}}}}, nil
	}
	// reasoning, built-in tools' calls, item references
	return &parsed{kind: "other"}, nil
}

// assembleResponses: the leading system (and developer) messages are the
// head; the calls in a row one assistant message.
func assembleResponses(c *conv, ps []*parsed) error {
	if stringField(c.fields, "previous_response_id") != "" || !isNull(c.fields["conversation"]) {
		c.asIs = "stateful"
	}
	c.key = stringField(c.fields, "prompt_cache_key")
	c.maxOutput = intField(c.fields, "max_output_tokens")
	c.overhead = append(append(c.overhead, c.fields["instructions"]...), c.fields["tools"]...)
	n := 0
	for n < len(ps) && ps[n].kind == "message" && (ps[n].role == "system" || ps[n].role == "developer") {
		c.overhead = append(c.overhead, c.elems[n]...)
		n++
	}
	c.head, c.elems = c.elems[:n], c.elems[n:]
	var calls *client.Message
	var spans []span
	var orphans []int
	flush := func() error {
		if calls == nil {
			return nil
		}
		d, err := digestOf(*calls)
		if err != nil {
			return err
		}
		c.add(*calls, d, spans...)
		calls, spans = nil, nil
		return nil
	}
	for i, p := range ps[n:] {
		switch p.kind {
		case "other":
			orphans = append(orphans, i)
			continue
		case "call":
			if calls == nil {
				calls = &client.Message{Role: client.Assistant}
			}
			calls.ToolCalls = append(calls.ToolCalls, *p.call)
			spans = append(append(spans, spansOf(orphans)...), span{elem: i})
			orphans = nil
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		c.add(p.msgs[0], p.digests[0], append(spansOf(orphans), span{elem: i})...)
		orphans = nil
	}
	if err := flush(); err != nil {
		return err
	}
	c.attach(orphans)
	return nil
}

// responsesContent reads a message's content or a tool's output: a
// string, or parts (input_text, output_text, input_image, refusal, ...).
func responsesContent(raw json.RawMessage) (client.Content, error) {
	if text, ok := textOf(raw); ok {
		return client.Content{Text: text, Empty: text == ""}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Refusal  string `json:"refusal"`
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return client.Content{}, fmt.Errorf("content must be a string or an array of parts")
	}
	var b contentBuilder
	for _, p := range parts {
		switch {
		case strings.HasSuffix(p.Type, "_text") || p.Type == "text":
			b.text(p.Text)
		case p.Type == "refusal":
			b.text(p.Refusal)
		case p.Type == "input_image" && p.ImageURL != "":
			b.image(p.ImageURL, p.Detail)
		default:
			b.text("[" + p.Type + "]")
		}
	}
	return b.content(), nil
}

// rebuildResponses clears a tool output (an item is whole: one message or
// part of one).
func rebuildResponses(raw json.RawMessage, _ []int, _ bool, clear map[int]string) (json.RawMessage, error) {
	p, ok := clear[-1]
	if !ok {
		return raw, nil
	}
	m, err := rawMap(raw)
	if err != nil {
		return nil, err
	}
	if _, ok := m["output"]; ok {
		m["output"] = jsonString(p)
	}
	return json.Marshal(m)
}
