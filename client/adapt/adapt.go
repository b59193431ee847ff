// Package adapt converts a session's context (client.ContextView.Messages)
// to what the OpenAI and Anthropic APIs take, and their replies back into
// messages to append — tool calls, tool results and images included —
// without importing their SDKs: the values here marshal to each API's wire
// format, which the SDKs' own parameter types read (Into):
//
//	var params []openai.ChatCompletionMessageParamUnion
//	err := adapt.Into(&params, adapt.ToOpenAI(view.Messages))
//
//	system, msgs := adapt.ToAnthropic(view.Messages)
//	var params []anthropic.MessageParam
//	err := adapt.Into(&params, msgs)
package adapt

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/compactor/compactor/client"
)

// Into decodes v's JSON into dst: an SDK's parameter type (a slice of
// openai.ChatCompletionMessageParamUnion, of anthropic.MessageParam, ...)
// from the values here.
func Into(dst, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("adapt: into %T: %w", dst, err)
	}
	return nil
}

// OpenAIMessage is a message of OpenAI's Chat Completions API.
type OpenAIMessage struct {
	Role string `json:"role"`
	// Content is a string, a list of content parts, or nil (an assistant
	// message that only calls tools).
	Content    any               `json:"content"`
	Name       string            `json:"name,omitempty"`
	ToolCalls  []client.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

// ToOpenAI returns the messages as the Chat Completions API takes them:
// the chat fields alone, without the ids, seqs, token counts and
// compaction metadata the service keeps. A tool message's content is
// text, and it has no name, as the API requires.
func ToOpenAI(msgs []client.Message) []OpenAIMessage {
	out := make([]OpenAIMessage, 0, len(msgs))
	for _, m := range msgs {
		o := OpenAIMessage{Role: string(m.Role), Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
		switch {
		case m.Role == client.Tool:
			o.Content, o.Name = m.Content.Text, "" // the API's tool message has no name
		case m.Content.Parts != nil:
			o.Content = m.Content.Parts
		case m.Content.Text != "" || m.Content.Empty || len(m.ToolCalls) == 0:
			o.Content = m.Content.Text
		}
		out = append(out, o)
	}
	return out
}

// FromOpenAI reads a reply of the Chat Completions API — a choice's
// message, as the SDK's openai.ChatCompletionMessage or its JSON — as a
// message to append, under id.
func FromOpenAI(id string, reply any) (client.Message, error) {
	var r struct {
		Role      string            `json:"role"`
		Content   *string           `json:"content"`
		Refusal   string            `json:"refusal"`
		ToolCalls []client.ToolCall `json:"tool_calls"`
	}
	if err := readReply("OpenAI", reply, &r, &r.Role); err != nil {
		return client.Message{}, err
	}
	m := client.Message{ID: id, Role: client.Assistant}
	switch {
	case r.Content != nil && *r.Content != "":
		m.Content = client.Content{Text: *r.Content}
	case r.Refusal != "":
		m.Content = client.Content{Text: r.Refusal}
	}
	for _, c := range r.ToolCalls {
		if c.Type == "" {
			c.Type = "function"
		}
		m.ToolCalls = append(m.ToolCalls, c)
	}
	if m.Content.Text == "" && len(m.ToolCalls) == 0 {
		return client.Message{}, errors.New("adapt: an OpenAI reply with neither content nor tool calls")
	}
	return m, nil
}

// readReply decodes a vendor's reply into dst (Into), whose role, once
// read, must be the assistant's (or absent).
func readReply(vendor string, reply, dst any, role *string) error {
	if err := Into(dst, reply); err != nil {
		return fmt.Errorf("%w (an %s reply)", err, vendor)
	}
	if *role != "" && *role != "assistant" {
		return fmt.Errorf("adapt: an %s reply of role %q: want assistant", vendor, *role)
	}
	return nil
}

// AnthropicMessage is a message of Anthropic's Messages API.
type AnthropicMessage struct {
	Role    string           `json:"role"`
	Content []AnthropicBlock `json:"content"`
}

// AnthropicBlock is a content block: text, image, tool_use or tool_result.
type AnthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// Source is an image's: {"type": "base64", "media_type", "data"} or
	// {"type": "url", "url"}.
	Source map[string]string `json:"source,omitempty"`
	// ID, Name and Input are a tool_use's.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID and Content are a tool_result's (its text as a text
	// block).
	ToolUseID string           `json:"tool_use_id,omitempty"`
	Content   []AnthropicBlock `json:"content,omitempty"`
}

// ToAnthropic returns the messages as the Messages API takes them: the
// system messages' text as the system prompt, tool calls as tool_use
// blocks, tool results as tool_result blocks of a user message, images as
// image blocks, and consecutive messages of one role merged (the API wants
// user and assistant in turn).
func ToAnthropic(msgs []client.Message) (system string, out []AnthropicMessage) {
	var sys []string
	for _, m := range msgs {
		var role string
		var blocks []AnthropicBlock
		switch m.Role {
		case client.System:
			if t := m.Content.Text; t != "" {
				sys = append(sys, t)
			}
			continue
		case client.User:
			role, blocks = "user", userBlocks(m.Content)
		case client.Assistant:
			role = "assistant"
			if t := m.Content.Text; strings.TrimSpace(t) != "" {
				blocks = append(blocks, AnthropicBlock{Type: "text", Text: t})
			}
			for _, c := range m.ToolCalls {
				input := json.RawMessage(c.Function.Arguments)
				if !json.Valid(input) || len(input) == 0 {
					input, _ = json.Marshal(map[string]string{"input": c.Function.Arguments})
				}
				blocks = append(blocks, AnthropicBlock{Type: "tool_use", ID: c.ID, Name: c.Function.Name, Input: input})
			}
		case client.Tool:
			role = "user"
			result := AnthropicBlock{Type: "tool_result", ToolUseID: m.ToolCallID}
			if t := m.Content.Text; t != "" {
				result.Content = []AnthropicBlock{{Type: "text", Text: t}}
			}
			blocks = []AnthropicBlock{result}
		default:
			continue
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			continue
		}
		out = append(out, AnthropicMessage{Role: role, Content: blocks})
	}
	return strings.Join(sys, "\n\n"), out
}

// userBlocks are a user message's content as blocks: text, and images
// from data URLs (base64) or https URLs.
func userBlocks(c client.Content) []AnthropicBlock {
	if c.Parts == nil {
		if c.Text == "" {
			return nil
		}
		return []AnthropicBlock{{Type: "text", Text: c.Text}}
	}
	var out []AnthropicBlock
	for _, raw := range c.Parts {
		var p struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(raw, &p) != nil {
			continue
		}
		switch p.Type {
		case "text":
			out = append(out, AnthropicBlock{Type: "text", Text: p.Text})
		case "image_url":
			out = append(out, AnthropicBlock{Type: "image", Source: imageSource(p.ImageURL.URL)})
		default:
			out = append(out, AnthropicBlock{Type: "text", Text: string(raw)})
		}
	}
	return out
}

func imageSource(url string) map[string]string {
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		if meta, data, ok := strings.Cut(rest, ","); ok {
			if mt, ok := strings.CutSuffix(meta, ";base64"); ok {
				return map[string]string{"type": "base64", "media_type": mt, "data": data}
			}
		}
	}
	return map[string]string{"type": "url", "url": url}
}

// FromAnthropic reads a reply of the Messages API — the SDK's
// anthropic.Message or its JSON — as a message to append, under id: its
// text blocks joined, its tool_use blocks as tool calls.
func FromAnthropic(id string, reply any) (client.Message, error) {
	var r struct {
		Role    string `json:"role"`
		Content []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
	}
	if err := readReply("Anthropic", reply, &r, &r.Role); err != nil {
		return client.Message{}, err
	}
	m := client.Message{ID: id, Role: client.Assistant}
	var texts []string
	for _, c := range r.Content {
		switch c.Type {
		case "text":
			texts = append(texts, c.Text)
		case "tool_use":
			args := string(c.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			m.ToolCalls = append(m.ToolCalls, client.ToolCall{ID: c.ID, Type: "function", Function: client.FunctionCall{Name: c.Name, Arguments: args}})
		}
	}
	m.Content = client.Content{Text: strings.Join(texts, "\n")}
	if m.Content.Text == "" && len(m.ToolCalls) == 0 {
		return client.Message{}, errors.New("adapt: an Anthropic reply with neither text nor tool calls")
	}
	return m, nil
}

// ToolResult is a tool's result as a message to append, answering the
// call callID.
func ToolResult(id, callID, tool, result string) client.Message {
	return client.Message{ID: id, Role: client.Tool, ToolCallID: callID, Name: tool, Content: client.Content{Text: result, Empty: result == ""}}
}
