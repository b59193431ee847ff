package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
)

// DefaultOpenAIURL is OpenAI's API base URL.
const DefaultOpenAIURL = "https://api.openai.com/v1"

// OpenAI calls the Chat Completions API (POST {base}/chat/completions) of
// OpenAI or a compatible server.
type OpenAI struct {
	base   string
	key    string
	client *http.Client
	table  *models.Table
}

// NewOpenAI returns the provider. baseURL "" means OpenAI itself, which
// needs key; a compatible server (vLLM, Ollama, llama.cpp) may need none.
// It returns ErrMissingKey when OpenAI's own endpoint has no key.
func NewOpenAI(baseURL, key string, client *http.Client, table *models.Table) (*OpenAI, error) {
	if baseURL == "" {
		baseURL = DefaultOpenAIURL
	}
	if key == "" && strings.HasPrefix(baseURL, DefaultOpenAIURL) {
		return nil, fmt.Errorf("%w: set OPENAI_API_KEY to use %s (or --base-url for a compatible server)", ErrMissingKey, baseURL)
	}
	if client == nil {
		client = &http.Client{}
	}
	if table == nil {
		table = models.Default()
	}
	return &OpenAI{base: trimSlash(baseURL), key: key, client: client, table: table}, nil
}

// Name implements Provider.
func (o *OpenAI) Name() string { return "openai" }

type openAIMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type openAIRequest struct {
	Model               string          `json:"model"`
	Messages            []openAIMessage `json:"messages"`
	MaxTokens           int             `json:"max_tokens,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
}

type openAIResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// Summarize implements Provider: one Chat Completions call. Reasoning
// models get max_completion_tokens and no temperature; others max_tokens
// and temperature 0.
func (o *OpenAI) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	body := openAIRequest{Model: req.Model, Messages: []openAIMessage{{Role: "system", Content: req.System}, {Role: "user", Content: req.Prompt}}}
	if o.table.Lookup(req.Model).MaxCompletionTokens {
		body.MaxCompletionTokens = req.MaxTokens
	} else {
		zero := 0.0
		body.MaxTokens, body.Temperature = req.MaxTokens, &zero
	}
	headers := map[string]string{}
	if o.key != "" {
		headers["Authorization"] = "Bearer " + o.key
	}
	var r openAIResponse
	if err := call(ctx, o.client, "openai", o.base+"/chat/completions", headers, body, &r); err != nil {
		return pipeline.SummaryResponse{}, err
	}
	if len(r.Choices) == 0 {
		return pipeline.SummaryResponse{}, malformed("openai", http.StatusOK, nil, errors.New("no choices"))
	}
	c := r.Choices[0]
	text := ""
	switch {
	case c.Message.Refusal != nil && *c.Message.Refusal != "":
		text = *c.Message.Refusal // not a summary: the pipeline's validation refuses it
	case c.Message.Content != nil:
		text = *c.Message.Content
	}
	return pipeline.SummaryResponse{Text: text, Model: r.Model, InputTokens: r.Usage.PromptTokens, OutputTokens: r.Usage.CompletionTokens,
		CacheReadTokens: r.Usage.PromptTokensDetails.CachedTokens}, nil
}
