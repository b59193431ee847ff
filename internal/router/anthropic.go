package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/compactor/compactor/internal/pipeline"
)

// Anthropic API constants.
const (
	DefaultAnthropicURL = "https://api.anthropic.com"
	AnthropicVersion    = "2023-06-01"
)

// Anthropic calls the Messages API (POST {base}/v1/messages).
type Anthropic struct {
	base   string
	key    string
	client *http.Client
}

// NewAnthropic returns the provider. It returns ErrMissingKey when
// Anthropic's own endpoint has no key.
func NewAnthropic(baseURL, key string, client *http.Client) (*Anthropic, error) {
	if baseURL == "" {
		baseURL = DefaultAnthropicURL
	}
	if key == "" && strings.HasPrefix(baseURL, DefaultAnthropicURL) {
		return nil, fmt.Errorf("%w: set ANTHROPIC_API_KEY to use %s (or --base-url for a compatible server)", ErrMissingKey, baseURL)
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Anthropic{base: trimSlash(baseURL), key: key, client: client}, nil
}

// Name implements Provider.
func (a *Anthropic) Name() string { return "anthropic" }

type anthropicRequest struct {
	Model       string             `json:"model"`
	MaxTokens   int                `json:"max_tokens"`
	System      string             `json:"system,omitempty"`
	Messages    []anthropicMessage `json:"messages"`
	Temperature float64            `json:"temperature"`
}

type anthropicMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type anthropicResponse struct {
	Type    string `json:"type"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

// Summarize implements Provider: one Messages call, the instruction as the
// top-level system field.
func (a *Anthropic) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	body := anthropicRequest{Model: req.Model, MaxTokens: req.MaxTokens, System: req.System,
		Messages: []anthropicMessage{{Role: "user", Content: req.Prompt}}}
	headers := map[string]string{"x-api-key": a.key, "anthropic-version": AnthropicVersion}
	var r anthropicResponse
	if err := call(ctx, a.client, "anthropic", a.base+"/v1/messages", headers, body, &r); err != nil {
		return pipeline.SummaryResponse{}, err
	}
	if r.Type != "message" {
		return pipeline.SummaryResponse{}, malformed("anthropic", http.StatusOK, nil, errors.New("type is not \"message\""))
	}
	var sb strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			sb.WriteString(c.Text)
		}
	}
	return pipeline.SummaryResponse{Text: sb.String(), Model: r.Model, InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
		CacheReadTokens: r.Usage.CacheReadInputTokens, CacheWriteTokens: r.Usage.CacheCreationInputTokens}, nil
}
