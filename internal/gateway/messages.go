package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactor/compactor/client"
)

// messagesAPI is Anthropic's Messages: an assistant message is one of the
// session's (its tool_use blocks its tool calls); a user message is one
// per tool_result block and one for the other blocks in a row.
var messagesAPI = &api{
	name: "messages", path: "/v1/messages", provider: "anthropic", list: "messages",
	element:  messagesElement,
	assemble: assembleMessages,
	rebuild:  rebuildMessages,
	summary: func(text string) json.RawMessage {
		return mustJSON(map[string]any{"role": "user", "content": []map[string]string{{"type": "text", "text": text}}})
	},
	errorBody: anthropicError,
	overflow:  anthropicOverflow,
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// messagesElement reads one message: a user message as its tool results
// and its other blocks in a row, an assistant message as one.
func messagesElement(raw []byte) (*parsed, error) {
	var m anthropicMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	p := &parsed{kind: m.Role}
	switch m.Role {
	case "user":
		return p, p.userMessage(m.Content)
	case "assistant":
		return p, p.assistantMessage(m.Content)
	}
	return nil, fmt.Errorf("role %q is not one of user, assistant", m.Role)
}

// add appends a message made of blocks (nil: all of the element).
func (p *parsed) add(m client.Message, blocks []int) {
	p.msgs = append(p.msgs, m)
	p.blocks = append(p.blocks, blocks)
}

// assembleMessages: each message's messages, in order; one that makes
// none (thinking alone) goes with the next.
func assembleMessages(c *conv, ps []*parsed) error {
	var meta struct {
		UserID string `json:"user_id"`
	}
	_ = json.Unmarshal(c.fields["metadata"], &meta)
	c.key = meta.UserID
	c.maxOutput = intField(c.fields, "max_tokens")
	c.overhead = append(append(c.overhead, c.fields["system"]...), c.fields["tools"]...)
	var orphans []int
	for i, p := range ps {
		if len(p.msgs) == 0 {
			orphans = append(orphans, i)
			continue
		}
		for j, m := range p.msgs {
			sp := []span{{elem: i, blocks: p.blocks[j]}}
			if j == 0 && len(orphans) > 0 {
				sp = append(spansOf(orphans), sp...)
				orphans = nil
			}
			c.add(m, p.digests[j], sp...)
		}
	}
	c.attach(orphans)
	return nil
}

// blocksOf reads a content: a string is one text block.
func blocksOf(raw json.RawMessage) ([]anthropicBlock, bool, error) {
	if s, ok := textOf(raw); ok {
		return []anthropicBlock{{Type: "text", Text: s}}, true, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, false, fmt.Errorf("content must be a string or an array of blocks")
	}
	return blocks, false, nil
}

// userMessage adds a user message's: each tool_result one tool message,
// the other blocks in a row one user message.
func (p *parsed) userMessage(raw json.RawMessage) error {
	blocks, plain, err := blocksOf(raw)
	if err != nil {
		return err
	}
	if plain {
		p.add(client.Message{Role: client.User, Content: client.Content{Text: blocks[0].Text, Empty: blocks[0].Text == ""}}, nil)
		return nil
	}
	var b contentBuilder
	var group []int
	flush := func() {
		if len(group) > 0 {
			p.add(client.Message{Role: client.User, Content: b.content()}, group)
		}
		b, group = contentBuilder{}, nil
	}
	for j, bl := range blocks {
		if bl.Type != "tool_result" {
			group = append(group, j)
			switch bl.Type {
			case "text":
				b.text(bl.Text)
			case "image":
				b.image(imageURL(bl), "")
			default:
				b.text("[" + bl.Type + "]")
			}
			continue
		}
		flush()
		if bl.ToolUseID == "" {
			return fmt.Errorf("content[%d]: a tool_result needs tool_use_id", j)
		}
		text, err := toolResultText(bl.Content)
		if err != nil {
			return fmt.Errorf("content[%d]: %v", j, err)
		}
		if bl.IsError {
			text = "Error: " + text
		}
		p.add(client.Message{Role: client.Tool, ToolCallID: bl.ToolUseID, Content: client.Content{Text: text, Empty: text == ""}}, []int{j})
	}
	flush()
	return nil
}

// imageURL is an image block's source as a URL (base64 as a data URL).
func imageURL(b anthropicBlock) string {
	if b.Source.Type == "base64" {
		return "data:" + b.Source.MediaType + ";base64," + b.Source.Data
	}
	if b.Source.URL != "" {
		return b.Source.URL
	}
	return "[image]"
}

// toolResultText is a tool_result's content as text (its images named).
func toolResultText(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	blocks, _, err := blocksOf(raw)
	if err != nil {
		return "", err
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		} else {
			texts = append(texts, "["+b.Type+"]")
		}
	}
	return strings.Join(texts, "\n"), nil
}

// assistantMessage adds an assistant message: its text, its tool_use
// blocks as tool calls (thinking and server tools' blocks go upstream with
// it, unstored).
func (p *parsed) assistantMessage(raw json.RawMessage) error {
	blocks, _, err := blocksOf(raw)
	if err != nil {
		return err
	}
	m := client.Message{Role: client.Assistant}
	var texts []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_use":
			args := string(b.Input)
			if isNull(b.Input) {
				args = "{}"
			}
			m.ToolCalls = append(m.ToolCalls, client.ToolCall{ID: b.ID, Type: "function", Function: client.FunctionCall{Name: b.Name, Arguments: args}})
		}
	}
	m.Content = client.Content{Text: strings.Join(texts, "\n")}
	if m.Content.Text == "" && len(m.ToolCalls) == 0 {
		return nil // thinking alone: it goes with the next message
	}
	p.add(m, nil)
	return nil
}

// rebuildMessages writes a user message with some of its blocks, the
// cleared tool_results' content replaced.
func rebuildMessages(raw json.RawMessage, blocks []int, whole bool, clear map[int]string) (json.RawMessage, error) {
	m, err := rawMap(raw)
	if err != nil {
		return nil, err
	}
	var content []json.RawMessage
	if json.Unmarshal(m["content"], &content) != nil {
		return raw, nil // a string: one message, never cleared
	}
	if whole || len(blocks) == len(content) && len(clear) == 0 {
		if len(clear) == 0 {
			return raw, nil
		}
		blocks = blocks[:0]
		for j := range content {
			blocks = append(blocks, j)
		}
	}
	kept := make([]json.RawMessage, 0, len(blocks))
	for _, j := range blocks {
		b := content[j]
		if p, ok := clear[j]; ok {
			bm, err := rawMap(b)
			if err != nil {
				return nil, err
			}
			bm["content"] = jsonString(p)
			if b, err = json.Marshal(bm); err != nil {
				return nil, err
			}
		}
		kept = append(kept, b)
	}
	list, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	m["content"] = list
	return json.Marshal(m)
}
