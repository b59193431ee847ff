package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/router"
)

// Real error bodies, as the APIs send them.
const (
	openAIContextLength = `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	openAIRateLimit     = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29800, Requested 1200. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	openAIServer        = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	openAIAuth          = `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	openAIQuota         = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	vllmContextLength   = `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4096 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`
	llamaCppContext     = `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`
	anthropicOverloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	anthropicTooLong    = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215089 tokens > 200000 maximum"}}`
	anthropicAuth       = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
	openAIOK            = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"## Goal\n- x","refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":321,"completion_tokens":45,"total_tokens":366}}`
	anthropicOK         = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"## Goal\n- y"}],"stop_reason":"end_turn","usage":{"input_tokens":400,"output_tokens":50}}`
)

type reply struct {
	status  int
	body    string
	headers map[string]string
	delay   time.Duration
}

// server replays replies in order (the last one repeats) and records the
// requests.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	replies []reply
	reqs    []*http.Request
	bodies  []map[string]any
}

func newServer(t *testing.T, replies ...reply) *server {
	s := &server{replies: replies}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(b, &body)
		s.mu.Lock()
		n := len(s.reqs)
		s.reqs = append(s.reqs, r)
		s.bodies = append(s.bodies, body)
		rep := s.replies[min(n, len(s.replies)-1)]
		s.mu.Unlock()
		if rep.delay > 0 {
			select {
			case <-time.After(rep.delay):
			case <-r.Context().Done():
				return
			}
		}
		for k, v := range rep.headers {
			w.Header().Set(k, v)
		}
		if rep.status == -1 { // a truncated body: promise more than is sent
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			w.Write([]byte(`{"choices":[{"mess`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		w.Write([]byte(rep.body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return nil
}

func newRouter(t *testing.T, provider, url string, sl *sleeps, timeout time.Duration) *router.Router {
	t.Helper()
	retry := router.DefaultRetry()
	retry.Sleep = sl.sleep
	r, err := router.FromSettings(router.Settings{Provider: provider, BaseURL: url, Timeout: timeout, Retry: &retry,
		Extractive: nopSummarizer{}, Getenv: func(k string) string {
			return map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "ak-test"}[k]
		}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type nopSummarizer struct{}

func (nopSummarizer) Summarize(context.Context, pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	return pipeline.SummaryResponse{Text: "extractive"}, nil
}

func request(model string) pipeline.SummaryRequest {
	return pipeline.SummaryRequest{Model: model, Task: pipeline.TaskSummarise, System: "SYS", Prompt: "PROMPT", MaxTokens: 1000}
}

func TestOpenAIWireFormat(t *testing.T) {
	srv := newServer(t, reply{status: 200, body: openAIOK})
	r := newRouter(t, "openai", srv.URL+"/v1/", &sleeps{}, time.Second)
	resp, err := r.Summarize(context.Background(), request("gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "## Goal\n- x" || resp.InputTokens != 321 || resp.OutputTokens != 45 || resp.Model != "gpt-4o-2024-08-06" {
		t.Fatalf("response %+v", resp)
	}
	req, body := srv.reqs[0], srv.bodies[0]
	if req.Method != "POST" || req.URL.Path != "/v1/chat/completions" {
		t.Fatalf("%s %s", req.Method, req.URL.Path)
	}
	if req.Header.Get("Authorization") != "Bearer sk-test" || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", req.Header)
	}
	msgs := body["messages"].([]any)
	sys, user := msgs[0].(map[string]any), msgs[1].(map[string]any)
	if body["model"] != "gpt-4o" || body["max_tokens"] != 1000.0 || body["temperature"] != 0.0 || body["max_completion_tokens"] != nil ||
		sys["role"] != "system" || sys["content"] != "SYS" || user["role"] != "user" || user["content"] != "PROMPT" || len(msgs) != 2 {
		t.Fatalf("body %v", body)
	}

	// Reasoning models take max_completion_tokens and no temperature.
	srv2 := newServer(t, reply{status: 200, body: openAIOK})
	r2 := newRouter(t, "openai", srv2.URL, &sleeps{}, time.Second)
	if _, err := r2.Summarize(context.Background(), request("o3-mini")); err != nil {
		t.Fatal(err)
	}
	if b := srv2.bodies[0]; b["max_completion_tokens"] != 1000.0 || b["max_tokens"] != nil || b["temperature"] != nil {
		t.Fatalf("o3-mini body %v", b)
	}
}

func TestAnthropicWireFormat(t *testing.T) {
	srv := newServer(t, reply{status: 200, body: anthropicOK})
	r := newRouter(t, "anthropic", srv.URL, &sleeps{}, time.Second)
	resp, err := r.Summarize(context.Background(), request("claude-sonnet-4-5"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "## Goal\n- y" || resp.InputTokens != 400 || resp.OutputTokens != 50 {
		t.Fatalf("response %+v", resp)
	}
	req, body := srv.reqs[0], srv.bodies[0]
	if req.URL.Path != "/v1/messages" || req.Header.Get("x-api-key") != "ak-test" || req.Header.Get("anthropic-version") != "2023-06-01" || req.Header.Get("Authorization") != "" {
		t.Fatalf("%s headers %v", req.URL.Path, req.Header)
	}
	msgs := body["messages"].([]any)
	if body["system"] != "SYS" || body["max_tokens"] != 1000.0 || body["model"] != "claude-sonnet-4-5" || len(msgs) != 1 ||
		msgs[0].(map[string]any)["role"] != "user" || msgs[0].(map[string]any)["content"] != "PROMPT" {
		t.Fatalf("body %v", body)
	}
}

func TestErrorClassification(t *testing.T) {
	tests := []struct {
		name      string
		provider  string
		replies   []reply
		calls     int
		want      error
		limit     int
		retryable bool
		waits     []time.Duration
	}{
		{"openai context length", "openai", []reply{{status: 400, body: openAIContextLength}}, 1, pipeline.ErrContextLength, 8192, false, nil},
		{"vllm context length", "openai", []reply{{status: 400, body: vllmContextLength}}, 1, pipeline.ErrContextLength, 4096, false, nil},
		{"llama.cpp context size", "openai", []reply{{status: 400, body: llamaCppContext}}, 1, pipeline.ErrContextLength, 4096, false, nil},
		{"anthropic prompt too long", "anthropic", []reply{{status: 400, body: anthropicTooLong}}, 1, pipeline.ErrContextLength, 200000, false, nil},
		{"auth not retried", "openai", []reply{{status: 401, body: openAIAuth}}, 1, router.ErrAuth, 0, false, nil},
		{"anthropic auth", "anthropic", []reply{{status: 401, body: anthropicAuth}}, 1, router.ErrAuth, 0, false, nil},
		{"quota not retried", "openai", []reply{{status: 429, body: openAIQuota}}, 1, router.ErrBadRequest, 0, false, nil},
		{"bad request", "openai", []reply{{status: 400, body: `{"error":{"message":"Invalid value for 'model'","type":"invalid_request_error","code":"model_not_found"}}`}}, 1, router.ErrBadRequest, 0, false, nil},
		{"429 with Retry-After then ok", "openai", []reply{{status: 429, body: openAIRateLimit, headers: map[string]string{"Retry-After": "2"}}, {status: 200, body: openAIOK}}, 2, nil, 0, false, []time.Duration{2 * time.Second}},
		{"500 twice then ok", "openai", []reply{{status: 500, body: openAIServer}, {status: 503, body: openAIServer}, {status: 200, body: openAIOK}}, 3, nil, 0, false, nil},
		{"500 until the budget is spent", "openai", []reply{{status: 500, body: openAIServer}}, 4, router.ErrServer, 0, true, nil},
		{"anthropic overloaded 529 then ok", "anthropic", []reply{{status: 529, body: anthropicOverloaded}, {status: 200, body: anthropicOK}}, 2, nil, 0, false, nil},
		{"anthropic overloaded to the end", "anthropic", []reply{{status: 529, body: anthropicOverloaded}}, 4, router.ErrRateLimited, 0, true, nil},
		{"malformed JSON retried", "openai", []reply{{status: 200, body: `{"choices": [`}, {status: 200, body: openAIOK}}, 2, nil, 0, false, nil},
		{"truncated body retried", "openai", []reply{{status: -1}, {status: 200, body: openAIOK}}, 2, nil, 0, false, nil},
		{"html error page", "openai", []reply{{status: 502, body: "<html><body>Bad Gateway</body></html>"}}, 4, router.ErrServer, 0, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.replies...)
			sl := &sleeps{}
			r := newRouter(t, tt.provider, srv.URL, sl, 2*time.Second)
			model := "gpt-4o"
			if tt.provider == "anthropic" {
				model = "claude-sonnet-4-5"
			}
			var (
				mu    sync.Mutex
				calls []router.Call
			)
			r.Observe(func(c router.Call) { mu.Lock(); calls = append(calls, c); mu.Unlock() })
			_, err := r.Summarize(pipeline.WithPurpose(context.Background(), pipeline.PurposePreparation), request(model))
			if srv.count() != tt.calls {
				t.Fatalf("%d calls, want %d (err %v)", srv.count(), tt.calls, err)
			}
			// The observer saw each call: the last one's outcome is the
			// error's class, each before it a failure.
			want := map[error]string{nil: router.CallOK, pipeline.ErrContextLength: router.CallContextLength, router.ErrAuth: router.CallAuth,
				router.ErrBadRequest: router.CallBadRequest, router.ErrServer: router.CallServerError, router.ErrRateLimited: router.CallRateLimited}[tt.want]
			if len(calls) != tt.calls || calls[len(calls)-1].Outcome != want {
				t.Fatalf("observed %+v, want %d calls, the last %s", calls, tt.calls, want)
			}
			for i, c := range calls {
				if c.Provider != tt.provider || c.Model != model || c.Purpose != pipeline.PurposePreparation || c.Duration <= 0 || i < len(calls)-1 && c.Outcome == router.CallOK {
					t.Fatalf("call %d: %+v", i, c)
				}
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("err %v", err)
				}
			} else if !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			var cle *pipeline.ContextLengthError
			if tt.limit > 0 && (!errors.As(err, &cle) || cle.Limit != tt.limit) {
				t.Fatalf("limit: %v", err)
			}
			var re interface{ Retryable() bool }
			if tt.want != nil && errors.As(err, &re) && re.Retryable() != tt.retryable {
				t.Fatalf("retryable %v, want %v", re.Retryable(), tt.retryable)
			}
			if tt.waits != nil && (len(sl.d) != len(tt.waits) || sl.d[0] != tt.waits[0]) {
				t.Fatalf("waits %v, want %v", sl.d, tt.waits)
			}
			if len(sl.d) != max(tt.calls-1, 0) && tt.want != pipeline.ErrContextLength {
				t.Fatalf("%d waits for %d calls", len(sl.d), tt.calls)
			}
		})
	}
}

func TestTimeoutPerCall(t *testing.T) {
	srv := newServer(t, reply{status: 200, body: openAIOK, delay: 2 * time.Second}, reply{status: 200, body: openAIOK})
	r := newRouter(t, "openai", srv.URL, &sleeps{}, 100*time.Millisecond)
	resp, err := r.Summarize(context.Background(), request("gpt-4o"))
	if err != nil || resp.InputTokens != 321 || srv.count() != 2 {
		t.Fatalf("a slow first answer should time out and be retried: %v, %d calls", err, srv.count())
	}
}

func TestDeadlineStopsRetries(t *testing.T) {
	srv := newServer(t, reply{status: 429, body: openAIRateLimit, headers: map[string]string{"Retry-After": "30"}})
	r := newRouter(t, "openai", srv.URL, &sleeps{}, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := r.Summarize(ctx, request("gpt-4o"))
	if !errors.Is(err, router.ErrRateLimited) || srv.count() != 1 {
		t.Fatalf("a Retry-After past the deadline must end the retries: %v, %d calls", err, srv.count())
	}
}

func TestMissingKeyAtStartup(t *testing.T) {
	none := func(string) string { return "" }
	for _, p := range []string{"openai", "anthropic"} {
		_, err := router.FromSettings(router.Settings{Provider: p, Extractive: nopSummarizer{}, Getenv: none})
		if !errors.Is(err, router.ErrMissingKey) || !strings.Contains(err.Error(), "_API_KEY") {
			t.Errorf("%s without a key: %v", p, err)
		}
	}
	// A compatible server needs no key.
	if _, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: "http://127.0.0.1:8000/v1", Extractive: nopSummarizer{}, Getenv: none}); err != nil {
		t.Errorf("local server: %v", err)
	}
	if _, err := router.FromSettings(router.Settings{Provider: "gemini", Extractive: nopSummarizer{}, Getenv: none}); !errors.Is(err, router.ErrUnknownProvider) {
		t.Errorf("unknown provider: %v", err)
	}
}

func TestPickProvider(t *testing.T) {
	srv := newServer(t, reply{status: 200, body: openAIOK})
	r := newRouter(t, "openai", srv.URL, &sleeps{}, time.Second)
	req := request("gpt-4o")
	req.Provider = "extractive"
	if resp, _ := r.Summarize(context.Background(), req); resp.Text != "extractive" {
		t.Fatal("the request's provider was not used")
	}
	// A model of an unconfigured provider goes to the default.
	if _, err := r.Summarize(context.Background(), request("claude-sonnet-4-5")); err != nil || srv.count() != 1 {
		t.Fatalf("fallback to default: %v", err)
	}
}

type messagesOnly struct{ nopSummarizer }

func (messagesOnly) ReadsMessagesOnly(pipeline.SummaryRequest) bool { return true }

// The router says a request reads only its messages when, and only when,
// the provider it picks for it does: the pipeline then renders no prompt.
func TestReadsMessagesOnlyFollowsTheProvider(t *testing.T) {
	none := func(string) string { return "" }
	r, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: "http://127.0.0.1:8000/v1", Extractive: messagesOnly{}, Getenv: none})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReadsMessagesOnly(pipeline.SummaryRequest{Model: "gpt-4o"}) {
		t.Fatal("an OpenAI request needs its prompt")
	}
	if !r.ReadsMessagesOnly(pipeline.SummaryRequest{Model: "gpt-4o", Provider: "extractive"}) {
		t.Fatal("an extractive request does not")
	}
	r, _ = router.FromSettings(router.Settings{Provider: "extractive", Extractive: nopSummarizer{}, Getenv: none})
	if r.ReadsMessagesOnly(pipeline.SummaryRequest{}) {
		t.Fatal("a summariser that does not say so reads the prompt")
	}
}

// Issue 42: a hung call was waited out in full (the call timeout, 60 s by
// default). Once the provider's latency is known, a request's call that
// runs past three times its p95 gets a second call beside it; the first
// answer wins and the hung call is cancelled. A preparation's call is not
// hedged (no runtime waits for it).
func TestHungCallIsHedged(t *testing.T) {
	var replies []reply
	for range 20 {
		replies = append(replies, reply{status: 200, body: openAIOK, delay: 10 * time.Millisecond})
	}
	replies = append(replies, reply{status: 200, body: openAIOK, delay: time.Hour}, reply{status: 200, body: openAIOK})
	srv := newServer(t, replies...)
	retry := router.DefaultRetry()
	retry.Sleep = (&sleeps{}).sleep
	r, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: srv.URL, Timeout: time.Minute, Retry: &retry,
		Hedge: &router.Hedge{Factor: 3, Floor: 200 * time.Millisecond, MinSamples: 20}, Extractive: nopSummarizer{},
		Getenv: func(string) string { return "sk-test" }})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []router.Call
	r.Observe(func(c router.Call) { mu.Lock(); calls = append(calls, c); mu.Unlock() })
	for range 20 {
		if _, err := r.Summarize(context.Background(), request("gpt-4o")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	resp, err := r.Summarize(context.Background(), request("gpt-4o"))
	took := time.Since(start)
	if err != nil || resp.InputTokens != 321 {
		t.Fatalf("the hedged call: %v %+v", err, resp)
	}
	// Answered by the hedge, not after the call timeout.
	if took > 30*time.Second || srv.count() != 22 {
		t.Fatalf("answered in %v after %d calls, want the hedge's answer (22 calls)", took, srv.count())
	}
	natsEventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 22
	})
	mu.Lock()
	hung, hedge := calls[20], calls[21]
	if !hedge.Hedged { // the observer may see the hedge's answer before the cancelled hung call
		hung, hedge = hedge, hung
	}
	mu.Unlock()
	if !hedge.Hedged || hedge.Outcome != router.CallOK || hung.Hedged || hung.Outcome != router.CallCancelled {
		t.Fatalf("the hung call %+v and its hedge %+v", hung, hedge)
	}
	// The next calls get these replies, in turn.
	next := func(rs ...reply) {
		srv.mu.Lock()
		srv.replies = append(srv.replies[:len(srv.reqs)], rs...)
		srv.mu.Unlock()
	}
	// A preparation's call waits for its own answer.
	next(reply{status: 200, body: openAIOK, delay: 500 * time.Millisecond}, reply{status: 200, body: openAIOK})
	before := srv.count()
	if _, err := r.Summarize(pipeline.WithPurpose(context.Background(), pipeline.PurposePreparation), request("gpt-4o")); err != nil {
		t.Fatal(err)
	}
	if n := srv.count() - before; n != 1 {
		t.Fatalf("a preparation's slow call made %d calls, want 1 (no hedge)", n)
	}
	// One a request waits for is hedged as the request's own.
	next(reply{status: 200, body: openAIOK, delay: time.Hour}, reply{status: 200, body: openAIOK})
	before = srv.count()
	var waiting atomic.Bool
	ctx := pipeline.WithAwaited(pipeline.WithPurpose(context.Background(), pipeline.PurposePreparation), waiting.Load)
	time.AfterFunc(300*time.Millisecond, func() { waiting.Store(true) })
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second) // not hedged: it fails here
	defer cancel()
	if _, err := r.Summarize(pctx, request("gpt-4o")); err != nil {
		t.Fatalf("a hung preparation call a request waits for: %v", err)
	}
	if n := srv.count() - before; n != 2 {
		t.Fatalf("a hung preparation call a request waits for made %d calls, want 2 (hedged)", n)
	}
}

// A replica just started has no latencies to go by: a hung call is hedged
// after the cold wait (a quarter of the call timeout by default), not
// waited out (make chaos found a restarted replica's request waiting the
// whole 60 s).
func TestHungCallIsHedgedWhenCold(t *testing.T) {
	srv := newServer(t, reply{status: 200, body: openAIOK, delay: time.Hour}, reply{status: 200, body: openAIOK})
	retry := router.DefaultRetry()
	retry.Sleep = (&sleeps{}).sleep
	r, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: srv.URL, Timeout: time.Hour, Retry: &retry,
		Hedge: &router.Hedge{Factor: 3, Floor: 10 * time.Millisecond, MinSamples: 20, Cold: 200 * time.Millisecond}, Extractive: nopSummarizer{},
		Getenv: func(string) string { return "sk-test" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // not hedged: it fails here, not in an hour
	defer cancel()
	start := time.Now()
	resp, err := r.Summarize(ctx, request("gpt-4o"))
	if err != nil || resp.InputTokens != 321 || srv.count() != 2 {
		t.Fatalf("the first call, hung: %v %+v after %d calls, want the hedge's answer", err, resp, srv.count())
	}
	t.Logf("answered by the hedge in %v", time.Since(start).Round(time.Millisecond))
	if _, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: srv.URL, Hedge: &router.Hedge{Cold: -1},
		Extractive: nopSummarizer{}, Getenv: func(string) string { return "sk-test" }}); err == nil {
		t.Fatal("a negative cold wait was accepted")
	}
}

// A hedge that fails (a 500: the provider fails a share of calls) ends the
// attempt: the first call ran past the hedge time, likely hung, and
// waiting for it waited out the call timeout (make chaos: a request at
// 60.6 s with a provider failing 30 % of calls). The next attempt answers.
func TestFailedHedgeDoesNotWaitForTheHungCall(t *testing.T) {
	srv := newServer(t, reply{status: 200, body: openAIOK, delay: time.Hour}, reply{status: 500, body: openAIServer}, reply{status: 200, body: openAIOK})
	retry := router.DefaultRetry()
	retry.Sleep = (&sleeps{}).sleep
	r, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: srv.URL, Timeout: time.Hour, Retry: &retry,
		Hedge: &router.Hedge{Factor: 3, Floor: 10 * time.Millisecond, MinSamples: 20, Cold: 100 * time.Millisecond}, Extractive: nopSummarizer{},
		Getenv: func(string) string { return "sk-test" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // waiting for the hung call: it fails here
	defer cancel()
	resp, err := r.Summarize(ctx, request("gpt-4o"))
	if err != nil || resp.InputTokens != 321 || srv.count() != 3 {
		t.Fatalf("hung call, failed hedge: %v %+v after %d calls, want the next attempt's answer (3 calls)", err, resp, srv.count())
	}
}

func natsEventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("not within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 42: a refused connection to the model counted as server_error. No
// connection at all is unreachable (still retried, still ErrServer).
func TestRefusedConnectionIsUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	r := newRouter(t, "openai", url, &sleeps{}, time.Second)
	var outcomes []string
	var mu sync.Mutex
	r.Observe(func(c router.Call) { mu.Lock(); outcomes = append(outcomes, c.Outcome); mu.Unlock() })
	_, err := r.Summarize(context.Background(), request("gpt-4o"))
	if !errors.Is(err, router.ErrUnreachable) || !errors.Is(err, router.ErrServer) {
		t.Fatalf("a refused connection: %v, want ErrUnreachable (an ErrServer)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != router.DefaultRetry().Attempts || outcomes[0] != router.CallUnreachable {
		t.Fatalf("calls %v, want every attempt unreachable", outcomes)
	}
}
