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
	parse:   parseResponses,
	rebuild: rebuildResponses,
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

// parseResponses reads the items; a string input is one user message.
func parseResponses(c *conv) error {
	c.stateful = stringField(c.fields, "previous_response_id") != "" || !isNull(c.fields["conversation"])
	c.key = stringField(c.fields, "prompt_cache_key")
	c.maxOutput = intField(c.fields, "max_output_tokens")
	c.overhead = append(append(c.overhead, c.fields["instructions"]...), c.fields["tools"]...)
	input := c.fields["input"]
	if s, ok := textOf(input); ok && !isNull(input) {
		input = mustJSON([]map[string]string{{"role": "user", "content": s}})
	}
	if err := json.Unmarshal(input, &c.elems); err != nil || c.elems == nil {
		return fmt.Errorf("input: a string or an array of items is required")
	}
	var r responsesReader
	for i, raw := range c.elems {
		var it responsesItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return fmt.Errorf("input[%d]: %v", i, err)
		}
		if err := r.item(c, i, raw, it); err != nil {
			return fmt.Errorf("input[%d]: %v", i, err)
		}
	}
	r.flush(c)
	c.attach(r.orphans)
	c.elems = c.elems[len(c.head):]
	for i := range c.from {
		for j := range c.from[i] {
			c.from[i][j].elem -= len(c.head)
		}
	}
	return nil
}

// responsesReader groups items into messages.
type responsesReader struct {
	calls   *client.Message
	spans   []span
	orphans []int
	started bool
}

func (r *responsesReader) item(c *conv, i int, raw json.RawMessage, it responsesItem) error {
	kind := it.Type
	if kind == "" && it.Role != "" {
		kind = "message"
	}
	if !r.started && kind == "message" && (it.Role == "system" || it.Role == "developer") {
		c.head = append(c.head, raw)
		c.overhead = append(c.overhead, raw...)
		return nil
	}
	r.started = true
	switch kind {
	case "function_call", "custom_tool_call", "local_shell_call":
		if r.calls == nil {
			r.calls = &client.Message{Role: client.Assistant, Content: client.Content{}}
		}
		args := it.Arguments
		switch kind {
		case "custom_tool_call":
			args = it.Input
		case "local_shell_call":
			args, it.Name = string(it.Action), "local_shell"
		}
		r.calls.ToolCalls = append(r.calls.ToolCalls, client.ToolCall{ID: it.CallID, Type: "function",
			Function: client.FunctionCall{Name: it.Name, Arguments: args}})
		r.spans = append(r.spans, spansOf(r.orphans)...)
		r.spans = append(r.spans, span{elem: i})
		r.orphans = nil
		return nil
	case "message", "function_call_output", "custom_tool_call_output", "local_shell_call_output":
	default:
		// reasoning, built-in tools' calls, item references: kept with
		// the message after them.
		r.orphans = append(r.orphans, i)
		return nil
	}
	r.flush(c)
	var m client.Message
	if kind == "message" {
		role := it.Role
		if role == "developer" {
			role = "system"
		}
		if role != "user" && role != "assistant" && role != "system" {
			return fmt.Errorf("role %q is not one of user, assistant, system, developer", it.Role)
		}
		content, err := responsesContent(it.Content)
		if err != nil {
			return err
		}
		m = client.Message{Role: client.Role(role), Content: content}
	} else {
		if it.CallID == "" {
			return fmt.Errorf("a %s needs call_id", kind)
		}
		content, err := responsesContent(it.Output)
		if err != nil {
			return fmt.Errorf("output: %v", err)
		}
		m = client.Message{Role: client.Tool, ToolCallID: it.CallID, Content: client.Content{Text: content.Text, Empty: content.Text == ""}}
	}
	c.add(m, append(spansOf(r.orphans), span{elem: i})...)
	r.orphans = nil
	return nil
}

// flush adds the calls read in a row as one assistant message.
func (r *responsesReader) flush(c *conv) {
	if r.calls == nil {
		return
	}
	c.add(*r.calls, r.spans...)
	r.calls, r.spans = nil, nil
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
