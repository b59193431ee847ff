package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// limitedModel is an OpenAI-compatible server whose model rejects prompts
// over limit tokens with OpenAI's real context_length_exceeded body, and
// otherwise answers with a summary in the template.
type limitedModel struct {
	limit    int
	counter  *tokens.Counter
	mu       sync.Mutex
	accepted []int
	rejected int
}

func (m *limitedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role, Content string
		} `json:"messages"`
	}
	if err := json.Unmarshal(b, &req); err != nil || len(req.Messages) != 2 || req.MaxTokens == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	n := 3
	for _, msg := range req.Messages {
		n += 4 + m.counter.Count(msg.Content)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n+req.MaxTokens > m.limit {
		m.rejected++
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			m.limit, n+req.MaxTokens, n, req.MaxTokens)
		return
	}
	m.accepted = append(m.accepted, n+req.MaxTokens)
	text := fmt.Sprintf("## Goal\n- fix the reported issue\n## User instructions\n- (none)\n## Decisions\n- part %d summarised\n## Facts and identifiers\n- prompt of %d tokens\n## Files and artifacts\n- (none)\n## Errors and fixes\n- (none)\n## Open tasks\n- (none)\n", len(m.accepted), n)
	out, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-x", "object": "chat.completion", "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": n, "completion_tokens": m.counter.Count(text)},
	})
	w.Write(out)
}

// TestCompactFileOpenAIChunksOnContextLength: a real OpenHands trajectory,
// compacted through an OpenAI-compatible server that rejects long prompts:
// the compaction succeeds by chunking, every accepted request was within the
// server's limit, and the summary within its bound.
func TestCompactFileOpenAIChunksOnContextLength(t *testing.T) {
	data := filepath.Join("..", "..", "..", "shared", "data", "agent_trajectories", "openhands", "multi_swe_bench_2runs.jsonl")
	if _, err := os.Stat(data); err != nil {
		t.Skipf("skipping: %s is absent", data)
	}
	convs, err := transcript.LoadOpenHands(data)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "openhands.json")
	b, _ := json.Marshal(convs[1].Messages)
	os.WriteFile(file, b, 0o644)

	c, _ := tokens.ForEncoding("o200k_base")
	model := &limitedModel{limit: 6000, counter: c}
	srv := httptest.NewServer(model)
	defer srv.Close()
	code, out, stderr := runCLI(t, "compact", "--file", file, "--provider", "openai", "--base-url", srv.URL+"/v1",
		"--context-limit", "16000", "--summary-model", "gpt-4o", "--max-summary-tokens", "500")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out[:min(len(out), 2000)])
	}
	var got struct {
		Result struct {
			Outcome       string `json:"outcome"`
			Chunks        int    `json:"chunks"`
			LLMCalls      int    `json:"llm_calls"`
			SummaryTokens int    `json:"summary_tokens"`
			InputTokens   int    `json:"summary_input_tokens"`
			TokensAfter   int    `json:"tokens_after"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(out), &got)
	r := got.Result
	t.Logf("%d accepted calls, %d rejected; result %+v", len(model.accepted), model.rejected, r)
	if r.Outcome != "compacted" || r.Chunks < 2 || model.rejected == 0 || r.TokensAfter > 16000 {
		t.Fatalf("want a chunked compaction after rejections: %+v, %d rejected", r, model.rejected)
	}
	for _, n := range model.accepted {
		if n > model.limit {
			t.Fatalf("an accepted request needed %d tokens, over %d", n, model.limit)
		}
	}
	// The whole compaction message within 500 tokens (Config.SummaryBound
	// is what that leaves its summary).
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens = 500
	if r.SummaryTokens > cfg.MaxSummaryTokens || r.LLMCalls != len(model.accepted)+model.rejected {
		t.Fatalf("summary %d tokens; %d calls vs %d requests", r.SummaryTokens, r.LLMCalls, len(model.accepted)+model.rejected)
	}
	if !strings.Contains(out, "part ") {
		t.Fatal("the stored summary is not the model's")
	}
}
