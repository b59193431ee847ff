package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// api is one provider API the gateway speaks.
type api struct {
	// name is the API's, in metrics and logs: "chat", "responses",
	// "messages".
	name string
	// path is its endpoint's, under the base URL (/v1/...).
	path string
	// provider is the upstream it goes to: "openai" or "anthropic".
	provider string
	// list is the field that holds the conversation.
	list string
	// element reads one element of the list; assemble makes the
	// conversation of the elements read, and the top-level fields.
	element  func(raw []byte) (*parsed, error)
	assemble func(c *conv, ps []*parsed) error
	// rebuild writes an element with only some of its blocks (whole: all
	// of it), some of them cleared to a placeholder (block -1: the
	// element's own content).
	rebuild func(raw json.RawMessage, blocks []int, whole bool, clear map[int]string) (json.RawMessage, error)
	// summary is the summary as a user message of the API.
	summary func(text string) json.RawMessage
	// errorBody is an error as the API's SDKs parse it.
	errorBody func(status int, kind, msg string) []byte
	// overflow says whether an upstream error is the context's length.
	overflow func(status int, body []byte) bool
}

var apis = []*api{chatAPI, responsesAPI, messagesAPI}

// parses reports whether the gateway reads a's calls (else it forwards
// them as they are).
func (a *api) parses() bool { return a.element != nil }

// read parses a request body for a, each element read once (ec).
func (a *api) read(body []byte, ec *elementCache) (*conv, error) {
	c := &conv{api: a}
	var err error
	if c.fields, c.elems, err = scan(body, a.list); err != nil {
		return nil, err
	}
	if raw, ok := c.fields["model"]; ok {
		if err := json.Unmarshal(raw, &c.model); err != nil {
			return nil, fmt.Errorf("model: %v", err)
		}
	}
	if raw, ok := c.fields["stream"]; ok {
		_ = json.Unmarshal(raw, &c.stream)
	}
	if c.elems == nil && a.name == "responses" {
		if s, ok := textOf(c.fields["input"]); ok && !isNull(c.fields["input"]) {
			c.elems = []json.RawMessage{mustJSON(map[string]string{"role": "user", "content": s})}
		}
	}
	if c.elems == nil {
		if a.name == "responses" {
			return nil, errors.New("input: a string or an array of items is required")
		}
		return nil, fmt.Errorf("%s: an array of messages is required", a.list)
	}
	ps := make([]*parsed, len(c.elems))
	for i, raw := range c.elems {
		if ps[i], err = ec.read(a, raw); err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", a.list, i, err)
		}
	}
	if err := a.assemble(c, ps); err != nil {
		return nil, err
	}
	c.chain()
	return c, nil
}

// body is the request body with the conversation's elements replaced.
func (c *conv) body(elems []json.RawMessage) ([]byte, error) {
	list, err := json.Marshal(elems)
	if err != nil {
		return nil, err
	}
	fields := make(map[string]json.RawMessage, len(c.fields))
	for k, v := range c.fields {
		fields[k] = v
	}
	fields[c.api.list] = list
	return json.Marshal(fields)
}

// openAIError is OpenAI's error body.
func openAIError(_ int, kind, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": kind, "param": nil, "code": nil}})
	return b
}

// anthropicError is Anthropic's error body.
func anthropicError(_ int, kind, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": kind, "message": msg}})
	return b
}

// errorKind is the error type both providers name for a status.
func errorKind(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "api_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// openAIOverflow: OpenAI's code for a context too long.
func openAIOverflow(status int, body []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return false
	}
	return e.Error.Code == "context_length_exceeded" || strings.Contains(e.Error.Message, "maximum context length")
}

// anthropicOverflow: Anthropic's "prompt is too long", or a request too
// large.
func anthropicOverflow(status int, body []byte) bool {
	if status == http.StatusRequestEntityTooLarge {
		return true
	}
	if status != http.StatusBadRequest {
		return false
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return false
	}
	m := strings.ToLower(e.Error.Message)
	return strings.Contains(m, "prompt is too long") || strings.Contains(m, "context window") || strings.Contains(m, "context length")
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}
