package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactor/compactor/client"
)

// chatAPI is OpenAI's Chat Completions: each message of `messages` is one
// of the session's.
var chatAPI = &api{
	name: "chat", path: "/v1/chat/completions", provider: "openai", list: "messages",
	element:   chatElement,
	assemble:  assembleChat,
	rebuild:   rebuildChat,
	summary:   func(text string) json.RawMessage { return mustJSON(map[string]string{"role": "user", "content": text}) },
	errorBody: openAIError,
	overflow:  openAIOverflow,
}

type chatMessage struct {
	Role string `json:"role"`
	// FunctionCall is the legacy function calling's (no call ids).
	FunctionCall json.RawMessage   `json:"function_call"`
	Content      json.RawMessage   `json:"content"`
	Name         string            `json:"name"`
	ToolCalls    []client.ToolCall `json:"tool_calls"`
	ToolCallID   string            `json:"tool_call_id"`
}

// chatElement reads one chat message.
func chatElement(raw []byte) (*parsed, error) {
	var m chatMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m.Role == "function" || !isNull(m.FunctionCall) {
		return &parsed{kind: "legacy"}, nil
	}
	msg, err := chatToMessage(m)
	if err != nil {
		return nil, err
	}
	return &parsed{kind: m.Role, msgs: []client.Message{msg}, blocks: [][]int{nil}}, nil
}

// assembleChat: the leading system (and developer) messages are the head,
// each other message one of the session's.
func assembleChat(c *conv, ps []*parsed) error {
	c.key = stringField(c.fields, "prompt_cache_key")
	c.maxOutput = max(intField(c.fields, "max_completion_tokens"), intField(c.fields, "max_tokens"))
	c.overhead = append(c.overhead, c.fields["tools"]...)
	n := 0
	for n < len(ps) && (ps[n].kind == "system" || ps[n].kind == "developer") {
		c.overhead = append(c.overhead, c.elems[n]...)
		n++
	}
	c.head, c.elems = c.elems[:n], c.elems[n:]
	for i, p := range ps[n:] {
		if p.kind == "legacy" {
			c.asIs = "legacy_functions"
			return nil
		}
		c.add(p.msgs[0], p.digests[0], span{elem: i})
	}
	return nil
}

// chatToMessage is a chat message as the session stores it.
func chatToMessage(m chatMessage) (client.Message, error) {
	out := client.Message{Role: client.Role(m.Role), Name: m.Name, ToolCallID: m.ToolCallID}
	switch m.Role {
	case "user", "system", "developer":
		if m.Role == "developer" {
			out.Role = client.System
		}
	case "assistant":
		for _, tc := range m.ToolCalls {
			if tc.Type == "" {
				tc.Type = "function"
			}
			out.ToolCalls = append(out.ToolCalls, tc)
		}
	case "tool":
		if m.ToolCallID == "" {
			return out, fmt.Errorf("a tool message needs tool_call_id")
		}
		out.Name = ""
	default:
		return out, fmt.Errorf("role %q is not one of system, developer, user, assistant, tool", m.Role)
	}
	content, err := chatContent(m.Content)
	if err != nil {
		return out, err
	}
	if m.Role == "tool" && content.Parts != nil {
		content = client.Content{Text: content.Text, Empty: content.Text == ""}
	}
	if content.Text == "" && content.Parts == nil && len(out.ToolCalls) == 0 {
		content.Empty = true
	}
	out.Content = content
	return out, nil
}

// chatContent reads a chat content: a string, null, or parts (text and
// images kept; audio and files named).
func chatContent(raw json.RawMessage) (client.Content, error) {
	if text, ok := textOf(raw); ok {
		return client.Content{Text: text, Empty: text == "" && !isNull(raw)}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Refusal  string `json:"refusal"`
		ImageURL struct {
			URL    string `json:"url"`
			Detail string `json:"detail"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return client.Content{}, fmt.Errorf("content must be a string, null or an array of parts")
	}
	var b contentBuilder
	for _, p := range parts {
		switch p.Type {
		case "text":
			b.text(p.Text)
		case "refusal":
			b.text(p.Refusal)
		case "image_url":
			b.image(p.ImageURL.URL, p.ImageURL.Detail)
		default:
			b.text("[" + p.Type + "]")
		}
	}
	return b.content(), nil
}

// contentBuilder makes a session content from text and images: plain text
// when there is no image, parts otherwise.
type contentBuilder struct {
	texts  []string
	parts  []json.RawMessage
	images bool
}

func (b *contentBuilder) text(t string) {
	b.texts = append(b.texts, t)
	b.parts = append(b.parts, client.TextPart(t))
}

func (b *contentBuilder) image(url, detail string) {
	b.images = true
	b.parts = append(b.parts, client.ImagePart(url, detail))
}

func (b *contentBuilder) content() client.Content {
	if b.images {
		return client.Content{Text: strings.Join(b.texts, "\n"), Parts: b.parts}
	}
	t := strings.Join(b.texts, "\n")
	return client.Content{Text: t, Empty: t == ""}
}

// rebuildChat clears a tool message's content (a chat message is one
// message: there are no blocks to choose).
func rebuildChat(raw json.RawMessage, _ []int, _ bool, clear map[int]string) (json.RawMessage, error) {
	p, ok := clear[-1]
	if !ok {
		return raw, nil
	}
	m, err := rawMap(raw)
	if err != nil {
		return nil, err
	}
	m["content"] = jsonString(p)
	return json.Marshal(m)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// stringField reads a top-level string field ("" when absent or not one).
func stringField(fields map[string]json.RawMessage, name string) string {
	var s string
	_ = json.Unmarshal(fields[name], &s)
	return s
}

// intField reads a top-level number field (0 when absent).
func intField(fields map[string]json.RawMessage, name string) int {
	var n int
	_ = json.Unmarshal(fields[name], &n)
	return n
}
