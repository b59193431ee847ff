// Package transcript reads conversations into chat messages: the generic
// formats a user hands to `session import` and `compact --file` (a JSON
// array of messages, an object with "messages", JSON lines), and the public
// datasets the tests and the evaluation replay (LoCoMo, tau-bench,
// SWE-agent, OpenHands).
package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/compactor/compactor/internal/session"
)

// ErrFormat is returned for input that is none of the accepted formats.
var ErrFormat = errors.New("not a conversation")

// wireMessage is a chat message as found in the wild: OpenAI's fields, plus
// SWE-agent's tool_call_ids list.
type wireMessage struct {
	// ID is the runtime's own id of the message, kept: an append repeated
	// with the same ids is applied once.
	ID          ID                 `json:"id"`
	Role        session.Role       `json:"role"`
	Content     session.Content    `json:"content"`
	Name        string             `json:"name"`
	ToolCalls   []session.ToolCall `json:"tool_calls"`
	ToolCallID  string             `json:"tool_call_id"`
	ToolCallIDs []string           `json:"tool_call_ids"`
}

// ID is a message id as runtimes send it: a string, or a number taken as
// its decimal text.
type ID string

// UnmarshalJSON takes a string, a number or null (no id).
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*id = ""
	case b[0] == '"':
		s, ok := session.Unquote(b)
		if !ok {
			if err := json.Unmarshal(b, &s); err != nil {
				return err
			}
		}
		*id = ID(s)
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("id must be a string or a number, got %s", b)
		}
		*id = ID(n.String())
	}
	return nil
}

func (w wireMessage) message() session.Message {
	m := session.Message{ID: string(w.ID), Role: w.Role, Content: w.Content, Name: w.Name, ToolCalls: w.ToolCalls, ToolCallID: w.ToolCallID}
	if m.ToolCallID == "" && len(w.ToolCallIDs) > 0 {
		m.ToolCallID = w.ToolCallIDs[0]
	}
	DefaultTypes(&m)
	return m
}

// DefaultTypes gives m's tool calls without a type the only one there is,
// "function", as Parse does.
func DefaultTypes(m *session.Message) {
	for i := range m.ToolCalls {
		if m.ToolCalls[i].Type == "" {
			m.ToolCalls[i].Type = "function"
		}
	}
}

// Parse reads a conversation: a JSON array of chat messages, an object with
// a "messages" (or "history", or "traj") array, or JSON lines with one
// message each. Every message is validated; the error names the first bad
// one.
func Parse(data []byte) ([]session.Message, error) {
	data = bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrFormat)
	}
	if !utf8.Valid(data) {
		// encoding/json would silently replace the bad bytes; refuse instead.
		off := 0
		for off < len(data) {
			r, size := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			off += size
		}
		return nil, fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrFormat, off)
	}
	var wire []wireMessage
	switch data[0] {
	case '[':
		if err := json.Unmarshal(data, &wire); err != nil {
			if lines, lerr := parseLines(data); lerr == nil {
				wire = lines
				break
			}
			return nil, fmt.Errorf("%w: JSON array of messages: %w", ErrFormat, err)
		}
	case '{':
		var obj struct {
			Messages []wireMessage `json:"messages"`
			History  []wireMessage `json:"history"`
			Traj     []wireMessage `json:"traj"`
		}
		if err := json.Unmarshal(data, &obj); err != nil {
			lines, lerr := parseLines(data)
			if lerr != nil {
				return nil, fmt.Errorf("%w: %w", ErrFormat, err)
			}
			wire = lines
			break
		}
		switch {
		case obj.Messages != nil:
			wire = obj.Messages
		case obj.History != nil:
			wire = obj.History
		case obj.Traj != nil:
			wire = obj.Traj
		default:
			// One message on one line is a JSON-lines file too.
			lines, lerr := parseLines(data)
			if lerr != nil || len(lines) == 0 || lines[0].Role == "" {
				return nil, fmt.Errorf("%w: object has no \"messages\" array", ErrFormat)
			}
			wire = lines
		}
	default:
		return nil, fmt.Errorf("%w: input starts with %q, want a JSON array, object or JSON lines", ErrFormat, data[0])
	}
	out := make([]session.Message, 0, len(wire))
	for i, w := range wire {
		m := w.message()
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func parseLines(data []byte) ([]wireMessage, error) {
	var out []wireMessage
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var w wireMessage
		if err := json.Unmarshal(b, &w); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, w)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Conversation is one named session from a dataset.
type Conversation struct {
	Name     string
	Source   string // dataset
	Messages []session.Message
	// QA holds LoCoMo's questions; DiaIndex maps a dialogue id ("D1:3") to
	// its message's index in Messages.
	QA       []QA
	DiaIndex map[string]int
}

// QA is one LoCoMo question with the dialogue ids of its evidence.
type QA struct {
	Question string
	Answer   string
	Evidence []string
	Category int
}

// normaliseText trims and drops carriage returns, which the datasets carry
// from Windows line endings.
func normaliseText(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }
