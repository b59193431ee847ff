package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/internal/telemetry"
)

// hopHeaders are a connection's own, never forwarded (RFC 9110 7.6.1),
// with the gateway's own and what the transport sets itself.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length", "Accept-Encoding", HeaderSession, HeaderKey}

// answerHopHeaders are those not copied from the upstream's answer.
var answerHopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Content-Length"}

// maxErrorBody bounds an upstream error body read to tell an overflow.
const maxErrorBody = 1 << 20

// forward sends body (nil: the request's own) to the upstream and copies
// its answer back, streamed as it comes. When the upstream refuses the
// call for its length and retry gives a body, that is sent once instead.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, a *api, path, model string, body []byte,
	retry func(context.Context, []byte) []byte) {
	ctx := r.Context()
	for {
		resp, err := g.send(ctx, r, a, path, model, body)
		if err != nil {
			if ctx.Err() == nil {
				g.fail(w, a, http.StatusBadGateway, "compactor gateway: the upstream: "+err.Error())
			}
			return
		}
		if retry != nil && (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge) {
			errBody, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			if a.overflow != nil && a.overflow(resp.StatusCode, errBody) {
				if next := retry(ctx, errBody); next != nil {
					body, retry = next, nil
					continue
				}
			}
			resp.Body = io.NopCloser(bytes.NewReader(errBody))
		}
		copyResponse(w, resp)
		return
	}
}

// send makes one upstream call, in a span of the GenAI conventions.
func (g *Gateway) send(ctx context.Context, r *http.Request, a *api, path, model string, body []byte) (*http.Response, error) {
	if body == nil {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, g.cfg.MaxBody)); err != nil {
			return nil, err
		}
	}
	// The GenAI conventions name every API's call "chat"; which API it
	// was is the gateway's own attribute.
	op := "chat"
	if !a.parses() {
		op = a.name
	}
	ctx, span := telemetry.Tracer().Start(ctx, strings.TrimSpace(op+" "+model), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", op), attribute.String("gen_ai.provider.name", a.provider),
			attribute.String("gen_ai.request.model", model), attribute.String("compactor.gateway.api", a.name)))
	u := g.cfg.Upstreams[a.provider] + path
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, bytes.NewReader(body))
	if err != nil {
		span.End()
		return nil, err
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	if start, ok := startOf(ctx); ok {
		g.m.added(a.name, time.Since(start))
	}
	resp, err := g.http.Do(req)
	if err != nil {
		telemetry.Fail(span, err)
		span.End()
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, resp.Status)
	}
	resp.Body = &endSpan{ReadCloser: resp.Body, span: span}
	return resp, nil
}

// endSpan ends the upstream call's span when its body is closed.
type endSpan struct {
	io.ReadCloser
	span trace.Span
}

func (e *endSpan) Close() error {
	e.span.End()
	return e.ReadCloser.Close()
}

// copyResponse writes the upstream's answer: status, headers and the body
// as it arrives (an SSE stream flushed event by event).
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range answerHopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

type startKey struct{}

// withStart marks when the gateway got the call, for its added latency.
func withStart(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, startKey{}, t)
}

func startOf(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(startKey{}).(time.Time)
	return t, ok
}
