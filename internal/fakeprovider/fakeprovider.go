// Package fakeprovider is a local server that speaks OpenAI's Chat
// Completions wire protocol, with OpenAI's own error bodies, and misbehaves
// on purpose: it fails, hangs and answers slowly as its Behaviour says. The
// fault tests and `compactor chaos` point the service's openai provider at
// it (no network, no key).
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/router"
)

// Action is what the server does with one call.
type Action struct {
	// Delay before answering (a slow model).
	Delay time.Duration
	// Hang: answer only when the caller gives up (or Release is called).
	Hang bool
	// Status, when not 0 or 200, answers that HTTP error with OpenAI's
	// body for it (500, 503, 429, 401).
	Status int
	// RetryAfter, with a 429 or 503, is sent as Retry-After (whole
	// seconds, at least 1) and retry-after-ms, as OpenAI does.
	RetryAfter time.Duration
}

// Mix is a random Behaviour with every kind of trouble a provider gives:
// each call fails with probability Fail (a 500 or a 503, alternately), is
// rate limited with probability RateLimited (a 429 with Retry-After),
// hangs with probability Hang, and otherwise answers after Delay (plus up
// to Jitter).
type Mix struct {
	Fail, RateLimited, Hang float64
	RetryAfter              time.Duration
	Delay, Jitter           time.Duration
}

// Behaviour returns the mix as a Behaviour.
func (m Mix) Behaviour() Behaviour {
	var n atomic.Int64
	return func(string) Action {
		r := rand.Float64()
		switch {
		case r < m.Fail:
			if n.Add(1)%2 == 0 {
				return Action{Status: 503}
			}
			return Action{Status: 500}
		case r < m.Fail+m.RateLimited:
			return Action{Status: 429, RetryAfter: m.RetryAfter}
		case r < m.Fail+m.RateLimited+m.Hang:
			return Action{Hang: true}
		}
		d := m.Delay
		if m.Jitter > 0 {
			d += time.Duration(rand.Int64N(int64(m.Jitter)))
		}
		return Action{Delay: d}
	}
}

// Behaviour decides each call's Action from the call's prompt (the
// transcript the service sent).
type Behaviour func(prompt string) Action

// Rates is a random Behaviour: each call fails with probability Fail (a 500
// or a 503, alternately), hangs with probability Hang, and otherwise
// answers after Delay (plus up to Jitter).
func Rates(fail, hang float64, delay, jitter time.Duration) Behaviour {
	return Mix{Fail: fail, Hang: hang, Delay: delay, Jitter: jitter}.Behaviour()
}

// Server is a running fake provider.
type Server struct {
	URL string // the base URL: .../v1

	behave  atomic.Pointer[Behaviour]
	srv     *http.Server
	release chan struct{}
	once    sync.Once

	calls, failed, hung, answered atomic.Int64
	// inFlight counts the calls being answered now.
	inFlight atomic.Int64
	// prepared counts the answered calls that said they were for a
	// preparation (X-Compactor-Purpose).
	prepared atomic.Int64
}

// Start serves on a free loopback port.
func Start(b Behaviour) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + l.Addr().String() + "/v1", release: make(chan struct{})}
	s.SetBehaviour(b)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// SetBehaviour changes how later calls are answered.
func (s *Server) SetBehaviour(b Behaviour) {
	if b == nil {
		b = func(string) Action { return Action{} }
	}
	s.behave.Store(&b)
}

// Release answers every hanging call (and every later one that would hang).
func (s *Server) Release() { s.once.Do(func() { close(s.release) }) }

// Close stops the server, releasing hanging calls.
func (s *Server) Close() {
	s.Release()
	_ = s.srv.Close()
}

// Stats are the calls so far: all, answered with an error, hung, answered
// with a summary.
func (s *Server) Stats() (calls, failed, hung, answered int64) {
	return s.calls.Load(), s.failed.Load(), s.hung.Load(), s.answered.Load()
}

// InFlight is how many calls are being answered now (a replica killed or
// paused now loses at most these).
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// PreparationCalls are the answered calls made for preparations (the
// service's calls that no request waited for).
func (s *Server) PreparationCalls() int64 { return s.prepared.Load() }

// errorBodies are OpenAI's error bodies for the statuses it answers.
var errorBodies = map[int]string{
	400: `{"error":{"message":"We could not parse the JSON body of your request.","type":"invalid_request_error","param":null,"code":null}}`,
	500: `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	503: `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","param":null,"code":null}}`,
	429: `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-test on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
	401: `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
}

// ChatRequest is what a stand-in reads of a Chat Completions request.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

// ReadRequest decodes a Chat Completions request. A body that is not one
// is answered with OpenAI's 400, and ok is false.
func ReadRequest(w http.ResponseWriter, r *http.Request) (req ChatRequest, body []byte, ok bool) {
	body, _ = io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		WriteError(w, http.StatusBadRequest)
		return req, body, false
	}
	return req, body, true
}

// WriteError answers status with OpenAI's body for it (a 500's for a
// status it has none for).
func WriteError(w http.ResponseWriter, status int) {
	b, ok := errorBodies[status]
	if !ok {
		b = errorBodies[500]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, b)
}

// WriteCompletion answers a chat.completion whose message is text, with
// its usage.
func WriteCompletion(w http.ResponseWriter, id int64, model, text string, promptTokens, completionTokens int) {
	out, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-%d", id), "object": "chat.completion",
		"created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": promptTokens, "completion_tokens": completionTokens, "total_tokens": promptTokens + completionTokens}})
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	req, body, ok := ReadRequest(w, r)
	if !ok {
		return
	}
	var prompt strings.Builder
	for _, m := range req.Messages {
		prompt.WriteString(m.Content)
		prompt.WriteByte('\n')
	}
	act := (*s.behave.Load())(prompt.String())
	if act.Hang {
		s.hung.Add(1)
		select {
		case <-r.Context().Done():
			return
		case <-s.release:
		}
	}
	if act.Delay > 0 {
		t := time.NewTimer(act.Delay)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	if act.Status != 0 && act.Status != http.StatusOK {
		s.failed.Add(1)
		if act.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(act.RetryAfter.Round(time.Second)/time.Second))))
			w.Header().Set("retry-after-ms", strconv.FormatInt(act.RetryAfter.Milliseconds(), 10))
		}
		WriteError(w, act.Status)
		return
	}
	s.answered.Add(1)
	if r.Header.Get("X-Compactor-Purpose") == "preparation" {
		s.prepared.Add(1)
	}
	text := summaryOf(prompt.String())
	WriteCompletion(w, s.calls.Load(), req.Model, text, len(body)/4, len(text)/4)
}

// summaryOf answers a summary in the service's template, carrying a few
// of the prompt's lines as facts.
func summaryOf(prompt string) string {
	var facts []string
	for _, line := range strings.Split(prompt, "\n") {
		line = strings.TrimSpace(line)
		if len(line) > 20 && len(line) < 200 && !strings.HasPrefix(line, "<") && !strings.HasPrefix(line, "#") {
			facts = append(facts, "- "+line)
		}
		if len(facts) == 4 {
			break
		}
	}
	if len(facts) == 0 {
		facts = []string{"- (none)"}
	}
	return "## Goal\n- continue the user's task\n## User instructions\n- (none)\n## Decisions\n- (none)\n## Facts and identifiers\n" +
		strings.Join(facts, "\n") + "\n## Files and artifacts\n- (none)\n## Errors and fixes\n- (none)\n## Open tasks\n- (none)\n"
}

// Summarizer is the service's model router pointed at the server: its
// openai provider (no key), retrying as in production but quickly (20 ms
// doubling to 100 ms), a call bounded to a minute; extractive is the
// router's offline provider.
func (s *Server) Summarizer(extractive pipeline.Summarizer) (pipeline.Summarizer, error) {
	retry := router.DefaultRetry()
	retry.Base, retry.Max = 20*time.Millisecond, 100*time.Millisecond
	return router.FromSettings(router.Settings{Provider: "openai", BaseURL: s.URL, Timeout: time.Minute, Retry: &retry,
		Extractive: extractive, Getenv: func(string) string { return "" }})
}
