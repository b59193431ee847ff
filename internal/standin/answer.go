package standin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// answer writes one reply in a call's protocol.
type answer struct {
	s       *Server
	w       http.ResponseWriter
	call    Call
	reply   Reply
	in, out int
	// rid and mid are the response's and message's ids.
	rid, mid string
}

type call struct {
	id, name, args string
}

func (a *answer) calls() []call {
	out := make([]call, len(a.reply.ToolCalls))
	for i, tc := range a.reply.ToolCalls {
		args := tc.Arguments
		if args == "" {
			args = "{}"
		}
		prefix := "call_"
		if a.call.API == "messages" {
			prefix = "toolu_"
		}
		id := tc.ID
		if id == "" {
			id = newID(prefix)
		}
		out[i] = call{id: id, name: tc.Name, args: args}
	}
	return out
}

// whole writes the reply as one JSON body.
func (a *answer) whole() {
	switch a.call.API {
	case "chat":
		writeJSON(a.w, 200, a.chatCompletion())
	case "responses":
		writeJSON(a.w, 200, a.response("completed", a.responseOutput(a.calls(), "")))
	default:
		writeJSON(a.w, 200, a.message(a.messageContent(a.calls()), a.stopReason(), a.out))
	}
}

func (a *answer) chatCompletion() map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
	if a.reply.Text != "" || len(a.reply.ToolCalls) == 0 {
		msg["content"] = a.reply.Text
	}
	finish := "stop"
	if cs := a.calls(); len(cs) > 0 {
		var tcs []map[string]any
		for _, c := range cs {
			tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msg["tool_calls"], finish = tcs, "tool_calls"
	}
	return map[string]any{"id": newID("chatcmpl-"), "object": "chat.completion", "created": time.Now().Unix(), "model": a.call.Model,
		"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage":              a.chatUsage(),
		"system_fingerprint": "fp_standin", "service_tier": "default"}
}

func (a *answer) chatUsage() map[string]any {
	return map[string]any{"prompt_tokens": a.in, "completion_tokens": a.out, "total_tokens": a.in + a.out,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
}

// sse starts an event stream.
func (a *answer) sse() *sse {
	h := a.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	a.w.WriteHeader(200)
	return &sse{w: a.w, rc: http.NewResponseController(a.w), delay: a.s.ChunkDelay}
}

type sse struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	delay time.Duration
	seq   int
}

// event writes one event (name "" for data only).
func (s *sse) event(name string, v any) {
	if s.delay > 0 && s.seq > 0 {
		time.Sleep(s.delay)
	}
	s.seq++
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	_ = s.rc.Flush()
}

func (a *answer) streamChat() {
	s := a.sse()
	id, created := newID("chatcmpl-"), time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": a.call.Model,
			"system_fingerprint": "fp_standin", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	s.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
	for _, piece := range pieces(a.reply.Text) {
		s.event("", chunk(map[string]any{"content": piece}, nil))
	}
	finish := "stop"
	for i, c := range a.calls() {
		finish = "tool_calls"
		s.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function",
			"function": map[string]any{"name": c.name, "arguments": ""}}}}, nil))
		for _, piece := range pieces(c.args) {
			s.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil))
		}
	}
	s.event("", chunk(map[string]any{}, finish))
	var opts struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(a.call.Body, &opts)
	if opts.StreamOptions.IncludeUsage {
		s.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": a.call.Model,
			"choices": []any{}, "usage": a.chatUsage()})
	}
	fmt.Fprint(a.w, "data: [DONE]\n\n")
	_ = s.rc.Flush()
}

// pieces splits text into a few deltas.
func pieces(text string) []string {
	var out []string
	r := []rune(text)
	for len(r) > 0 {
		n := min(len(r), 16)
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	return out
}
