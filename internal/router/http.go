package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/pipeline"
)

// maxBody bounds a provider's answer; a summary is a few KB.
const maxBody = 8 << 20

// PurposeHeader names what a summary call is for when it is not a
// request's compaction (pipeline.PurposePreparation), so that a proxy or
// a provider's logs can tell the two kinds of traffic apart.
const PurposeHeader = "X-Compactor-Purpose"

// post sends a JSON body and returns the status, headers and the whole
// answer. A transport failure or an unreadable body is a retryable
// *APIError (ErrServer).
func post(ctx context.Context, client *http.Client, provider, url string, headers map[string]string, body any) (int, http.Header, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s: encode request: %w", provider, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s: %w", provider, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if p := pipeline.Purpose(ctx); p != "" {
		req.Header.Set(PurposeHeader, p) // a preparation's call: nobody waits for it yet
	}
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		msg, kind := err.Error(), ErrServer
		var op *net.OpError
		var dns *net.DNSError
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			msg = "call timed out: " + msg
		case errors.As(err, &dns), errors.As(err, &op) && op.Op == "dial":
			kind = ErrUnreachable
		}
		return 0, nil, nil, &APIError{Provider: provider, Message: msg, kind: kind}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return resp.StatusCode, resp.Header, nil, &APIError{Provider: provider, Status: resp.StatusCode, Message: "reading the answer: " + err.Error(), kind: ErrServer}
	}
	if len(data) > maxBody {
		return resp.StatusCode, resp.Header, nil, &APIError{Provider: provider, Status: resp.StatusCode, Message: fmt.Sprintf("answer over %d bytes", maxBody), kind: ErrServer}
	}
	return resp.StatusCode, resp.Header, data, nil
}

// call posts body and decodes a 2xx answer into out. A non-2xx answer is
// classified (classify), an undecodable one is a retryable malformed-answer
// error.
func call(ctx context.Context, client *http.Client, provider, url string, headers map[string]string, body, out any) error {
	status, h, data, err := post(ctx, client, provider, url, headers, body)
	if err != nil {
		return err
	}
	if status < 200 || status > 299 {
		return classify(provider, status, h, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return malformed(provider, status, data, err)
	}
	return nil
}

// errorBody is the union of the error shapes providers send: OpenAI's
// {"error": {...}}, Anthropic's {"type": "error", "error": {...}}, vLLM's
// flat {"object": "error", "message": ...}, llama.cpp's n_ctx.
type errorBody struct {
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

type errorDetail struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	NCtx    int             `json:"n_ctx"`
}

func parseError(data []byte) (msg, typ, code string, nctx int) {
	var b errorBody
	if json.Unmarshal(data, &b) != nil {
		return strings.TrimSpace(string(data[:min(len(data), 300)])), "", "", 0
	}
	msg, typ, code = b.Message, b.Type, rawString(b.Code)
	if len(b.Error) > 0 {
		var d errorDetail
		if json.Unmarshal(b.Error, &d) == nil {
			msg, typ, code, nctx = d.Message, d.Type, rawString(d.Code), d.NCtx
		} else {
			var s string
			if json.Unmarshal(b.Error, &s) == nil {
				msg = s
			}
		}
	}
	return msg, typ, code, nctx
}

func rawString(r json.RawMessage) string {
	if len(r) == 0 || string(r) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s
	}
	return string(r)
}

var (
	reContextLength = regexp.MustCompile(`(?i)maximum context length|context[_ ]length|context window|prompt is too long|too many tokens|exceeds? the (available )?context|input is too long|reduce the length`)
	reLimit         = regexp.MustCompile(`(?i)maximum context length is (\d+)|> ?(\d+) maximum|context (?:size|window|length) (?:of|is) (\d+)`)
)

// classify turns a non-2xx answer into a context-length error or an
// *APIError of the right class.
func classify(provider string, status int, h http.Header, data []byte) error {
	msg, typ, code, nctx := parseError(data)
	if isContextLength(status, msg, typ, code) {
		limit := nctx
		if m := reLimit.FindStringSubmatch(msg); m != nil {
			for _, g := range m[1:] {
				if n, err := strconv.Atoi(g); err == nil {
					limit = n
					break
				}
			}
		}
		return &pipeline.ContextLengthError{Limit: limit, Message: fmt.Sprintf("%s (HTTP %d): %s", provider, status, msg)}
	}
	e := &APIError{Provider: provider, Status: status, Type: typ, Code: code, Message: msg, RetryAfter: parseRetryAfter(h, time.Now())}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.kind = ErrAuth
	case code == "insufficient_quota":
		e.kind = ErrBadRequest // a 429 that waiting does not fix
	case status == http.StatusTooManyRequests || status == 529 || typ == "overloaded_error" || typ == "rate_limit_error":
		e.kind = ErrRateLimited
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		e.kind = ErrServer
	default:
		e.kind = ErrBadRequest
	}
	return e
}

func isContextLength(status int, msg, typ, code string) bool {
	switch {
	case code == "context_length_exceeded" || typ == "exceed_context_size_error":
		return true
	case status == http.StatusRequestEntityTooLarge || typ == "request_too_large":
		return true
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return reContextLength.MatchString(msg)
	}
	return false
}

// malformed is the error for a 2xx answer that is not the API's shape.
func malformed(provider string, status int, data []byte, err error) error {
	return &APIError{Provider: provider, Status: status, Message: fmt.Sprintf("malformed answer (%v): %.200s", err, data), kind: ErrServer}
}
