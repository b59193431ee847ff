// Package standin is a stand-in model provider that speaks the wire
// protocols agents use — OpenAI Chat Completions and Responses, Anthropic
// Messages, each streamed (SSE) or not — with the providers' own reply
// and error bodies, and a context window it enforces as they do (OpenAI's
// context_length_exceeded, Anthropic's "prompt is too long"). What it
// answers is scripted (a Script), so an agent can be driven through a
// multi-step task without a model, and it records what each call carried.
// The gateway's tests, its benchmark and `compactor standin` use it.
package standin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactor/compactor/internal/tokens"
)

// Call is one call as the stand-in read it.
type Call struct {
	// API is "chat", "responses" or "messages".
	API    string
	Model  string
	Stream bool
	// Tokens counts the call's text (messages, system, tools) with the
	// o200k_base tokenizer: what the window is checked against.
	Tokens int
	// Body is the call's JSON as it came.
	Body json.RawMessage
	// Tools names the tools the call offers.
	Tools []string
	// Results counts the tool results in the call's conversation; Last is
	// the text of its last message.
	Results int
	Last    string
	// LastCall is the call id the last message answers, when it is a
	// tool result.
	LastCall string
	// Header is the call's headers.
	Header http.Header
	// Refused: the call was over the window.
	Refused bool
}

// Reply is what a call is answered: text, tool calls, or both.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
}

// ToolCall is a call of one of the request's tools.
type ToolCall struct {
	// ID is the call's id (default: a new one).
	ID   string
	Name string
	// Arguments is a JSON object.
	Arguments string
}

// Script answers a call.
type Script func(Call) Reply

// Echo answers every call with a short text naming what it read.
func Echo(c Call) Reply {
	return Reply{Text: fmt.Sprintf("ok: %d tokens, %d tool results", c.Tokens, c.Results)}
}

// Steps calls the first tool the call offers, with args, n times in a
// row, then answers "done". The step is in the call's id, and the last
// message (the result of the step before) names it, so the count holds
// however the conversation before it was compacted.
func Steps(n int, args string) Script {
	return func(c Call) Reply {
		step := 0
		if m := stepRe.FindStringSubmatch(c.LastCall); m != nil {
			step, _ = strconv.Atoi(m[1])
		}
		if step >= n || len(c.Tools) == 0 {
			return Reply{Text: fmt.Sprintf("done after %d steps", step)}
		}
		prefix := "call_"
		if c.API == "messages" {
			prefix = "toolu_"
		}
		return Reply{Text: fmt.Sprintf("step %d", step+1),
			ToolCalls: []ToolCall{{ID: fmt.Sprintf("%ss%d_%s", prefix, step+1, newID("")), Name: c.Tools[0], Arguments: args}}}
	}
}

var stepRe = regexp.MustCompile(`_s(\d+)_`)

// Server is a running stand-in.
type Server struct {
	// URL is the base URL (no /v1: the OpenAI SDKs take URL+"/v1").
	URL string
	// Window is the context window enforced (0: none).
	Window int
	// Delay is waited before answering; ChunkDelay between streamed
	// events.
	Delay, ChunkDelay time.Duration

	script  Script
	srv     *http.Server
	counter *tokens.Counter
	mu      sync.Mutex
	calls   []Call
	// failed are the X-Standin-Fail-Once keys answered with a 500.
	failed map[string]bool
	// refusals are the malformed calls' errors.
	refusals []string
}

// Start serves on addr ("127.0.0.1:0": a free loopback port).
func Start(addr string, window int, script Script) (*Server, error) {
	if script == nil {
		script = Echo
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + l.Addr().String(), Window: window, script: script, counter: counter, failed: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle("chat"))
	mux.HandleFunc("POST /v1/responses", s.handle("responses"))
	mux.HandleFunc("POST /v1/messages", s.handle("messages"))
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []map[string]any{{"id": "standin", "object": "model", "owned_by": "standin"}}})
	})
	mux.HandleFunc("GET /standin/calls", func(w http.ResponseWriter, _ *http.Request) {
		type summary struct {
			API     string `json:"api"`
			Model   string `json:"model"`
			Stream  bool   `json:"stream"`
			Tokens  int    `json:"tokens"`
			Refused bool   `json:"refused"`
			Results int    `json:"tool_results"`
		}
		out := []summary{}
		for _, c := range s.Calls() {
			out = append(out, summary{API: c.API, Model: c.Model, Stream: c.Stream, Tokens: c.Tokens, Refused: c.Refused, Results: c.Results})
		}
		writeJSON(w, 200, map[string]any{"window": s.Window, "calls": out, "refusals": append([]string{}, s.Refusals()...)})
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Refusals returns the errors malformed calls were answered (a tool
// result without its call among them).
func (s *Server) Refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refusals...)
}

// SetScript changes how later calls are answered.
func (s *Server) SetScript(script Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = script
}

// Close stops the server.
func (s *Server) Close() { _ = s.srv.Close() }

// Calls returns the calls so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

func (s *Server) handle(api string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		c, err := s.read(api, body)
		if err != nil {
			s.mu.Lock()
			s.refusals = append(s.refusals, err.Error())
			s.mu.Unlock()
			s.invalid(w, api, err.Error())
			return
		}
		c.Header = r.Header.Clone()
		s.mu.Lock()
		s.calls = append(s.calls, c)
		key := r.Header.Get("X-Standin-Fail-Once")
		fail := key != "" && !s.failed[key]
		if fail {
			s.failed[key] = true
		}
		s.mu.Unlock()
		if fail {
			s.serverError(w, api)
			return
		}
		if s.Window > 0 && c.Tokens > s.Window {
			s.mu.Lock()
			s.calls[len(s.calls)-1].Refused = true
			s.mu.Unlock()
			s.overflow(w, api, c.Tokens)
			return
		}
		if s.Delay > 0 {
			time.Sleep(s.Delay)
		}
		s.mu.Lock()
		script := s.script
		s.mu.Unlock()
		reply := script(c)
		out := s.counter.Count(reply.Text) + 1
		for _, tc := range reply.ToolCalls {
			out += s.counter.Count(tc.Arguments) + 3
		}
		a := answer{s: s, w: w, call: c, reply: reply, in: c.Tokens, out: out, rid: newID("resp_"), mid: newID("msg_")}
		switch {
		case !c.Stream:
			a.whole()
		case api == "chat":
			a.streamChat()
		case api == "responses":
			a.streamResponses()
		default:
			a.streamMessages()
		}
	}
}

// read parses a call enough to count it and script its answer.
func (s *Server) read(api string, body []byte) (Call, error) {
	var req struct {
		Model    string            `json:"model"`
		Stream   bool              `json:"stream"`
		Messages []json.RawMessage `json:"messages"`
		Input    json.RawMessage   `json:"input"`
		Tools    []struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return Call{}, fmt.Errorf("We could not parse the JSON body of your request. (%v)", err)
	}
	if req.Model == "" {
		return Call{}, fmt.Errorf("you must provide a model parameter")
	}
	c := Call{API: api, Model: req.Model, Stream: req.Stream, Body: body}
	for _, t := range req.Tools {
		c.Tools = append(c.Tools, t.Name+t.Function.Name)
	}
	var texts []string
	collect(body, &texts, "")
	for _, t := range texts {
		c.Tokens += s.counter.Count(t) + 1 // (each string counted once: the counter keeps counts)
	}
	items := req.Messages
	if api == "responses" {
		if err := json.Unmarshal(req.Input, &items); err != nil {
			items = []json.RawMessage{req.Input}
		}
	}
	if api == "messages" && req.MaxTokens <= 0 {
		return Call{}, fmt.Errorf("max_tokens: Field required")
	}
	if len(items) == 0 {
		return Call{}, fmt.Errorf("messages: at least one message is required")
	}
	if why := unpaired(api, items); why != "" {
		return Call{}, errors.New(why)
	}
	for _, it := range items {
		c.Results += strings.Count(string(it), `"tool_result"`) + strings.Count(string(it), `"function_call_output"`)
		if strings.Contains(string(it), `"role":"tool"`) || strings.Contains(string(it), `"role": "tool"`) {
			c.Results++
		}
	}
	var last []string
	collect(items[len(items)-1], &last, "")
	c.Last = strings.Join(last, "\n")
	c.LastCall = lastCall(items[len(items)-1])
	return c, nil
}

// collect gathers the string values of a JSON value, but its ids,
// signatures and the model's name.
func collect(raw json.RawMessage, out *[]string, key string) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	walk(v, out, key)
}

func walk(v any, out *[]string, key string) {
	switch x := v.(type) {
	case string:
		switch key {
		case "model", "id", "tool_use_id", "tool_call_id", "call_id", "signature", "type", "role", "data", "url", "image_url":
		default:
			*out = append(*out, x)
		}
	case []any:
		for _, e := range x {
			walk(e, out, key)
		}
	case map[string]any:
		for k, e := range x {
			walk(e, out, k)
		}
	}
}

// invalid answers a malformed call as the provider does.
func (s *Server) invalid(w http.ResponseWriter, api, msg string) {
	if api == "messages" {
		writeJSON(w, 400, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg},
			"request_id": newID("req_")})
		return
	}
	writeJSON(w, 400, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
}

// serverError answers a 500 as the provider does (the first call that
// carries an X-Standin-Fail-Once key: an SDK retries it).
func (s *Server) serverError(w http.ResponseWriter, api string) {
	if api == "messages" {
		writeJSON(w, 500, map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": "Internal server error"},
			"request_id": newID("req_")})
		return
	}
	writeJSON(w, 500, map[string]any{"error": map[string]any{"message": "The server had an error while processing your request. Sorry about that!",
		"type": "server_error", "param": nil, "code": nil}})
}

// overflow answers a call over the window with the provider's error.
func (s *Server) overflow(w http.ResponseWriter, api string, n int) {
	if api == "messages" {
		writeJSON(w, 400, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error",
			"message": fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, s.Window)}, "request_id": newID("req_")})
		return
	}
	writeJSON(w, 400, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", s.Window, n),
		"type":    "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newID is a provider-looking id.
func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// lastCall is the call id a message answers: a chat tool message's, a
// function_call_output's, or a user message's last tool_result's.
func lastCall(raw json.RawMessage) string {
	var m struct {
		ToolCallID string `json:"tool_call_id"`
		CallID     string `json:"call_id"`
		Content    []struct {
			Type      string `json:"type"`
			ToolUseID string `json:"tool_use_id"`
		} `json:"content"`
	}
	_ = json.Unmarshal(raw, &m)
	id := m.ToolCallID + m.CallID
	for _, b := range m.Content {
		if b.Type == "tool_result" {
			id = b.ToolUseID
		}
	}
	return id
}

// unpaired says what a provider refuses in a conversation's tool calls and
// results, in its own words: a result with no call before it, a call with
// no result right after it ("" when they pair).
func unpaired(api string, items []json.RawMessage) string {
	type entry struct {
		Type       string `json:"type"`
		Role       string `json:"role"`
		CallID     string `json:"call_id"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
		Content json.RawMessage `json:"content"`
	}
	open := map[string]int{}
	for i, raw := range items {
		var e entry
		_ = json.Unmarshal(raw, &e)
		switch api {
		case "chat":
			if e.Role == "tool" {
				if _, ok := open[e.ToolCallID]; !ok {
					return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages.[%d].role)", i)
				}
				delete(open, e.ToolCallID)
				continue
			}
			for id, at := range open {
				return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s (messages.[%d].role)", id, at)
			}
			for _, c := range e.ToolCalls {
				open[c.ID] = i
			}
		case "responses":
			switch e.Type {
			case "function_call", "custom_tool_call":
				open[e.CallID] = i
			case "function_call_output", "custom_tool_call_output":
				if _, ok := open[e.CallID]; !ok {
					return "No tool call found for function call output with call_id " + e.CallID + "."
				}
				delete(open, e.CallID)
			}
		case "messages":
			var blocks []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
			}
			_ = json.Unmarshal(e.Content, &blocks)
			answered := map[string]bool{}
			for j, b := range blocks {
				if b.Type == "tool_result" {
					if _, ok := open[b.ToolUseID]; !ok {
						return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
					}
					answered[b.ToolUseID] = true
				}
			}
			for id, at := range open {
				if !answered[id] {
					return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", at, id)
				}
			}
			open = map[string]int{}
			for _, b := range blocks {
				if b.Type == "tool_use" {
					open[b.ID] = i
				}
			}
		}
	}
	if api == "responses" {
		for id := range open {
			return "No tool output found for function call " + id + "."
		}
	}
	return ""
}
