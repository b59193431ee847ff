// Package router is the model router: it sends each summary call to the
// provider that serves its model — OpenAI's Chat Completions API (and any
// compatible server: vLLM, Ollama, llama.cpp), Anthropic's Messages API,
// or the offline extractive summariser — with a per-call timeout, and
// retries with jittered exponential backoff what a retry can fix (rate
// limits, overload, 5xx, transport failures), honouring Retry-After, within
// the request's deadline. Auth and bad-request errors fail at once; a
// context-length error is returned as pipeline.ErrContextLength so the
// pipeline re-chunks smaller.
package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/telemetry"
)

var _ pipeline.Summarizer = (*Router)(nil)

// Provider is one summary backend.
type Provider interface {
	// Name is the provider's name in config: "openai", "anthropic",
	// "extractive".
	Name() string
	// Summarize makes one call, without retries, and returns a classified
	// error (*APIError or pipeline.ErrContextLength).
	Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error)
}

// Router implements pipeline.Summarizer over providers. It is safe for
// concurrent use.
type Router struct {
	providers map[string]Provider
	def       string
	table     *models.Table
	retry     Retry
	timeout   time.Duration
	hedge     Hedge
	// latency holds each provider's and model's *latencies.
	latency sync.Map
	observe atomic.Pointer[func(Call)]
}

// Call is one model call as the router made it (each retry is a call of
// its own): the provider, the model asked for, how it ended and how long
// it took, and what it was for (pipeline.Purpose: "" for a request's,
// "preparation" for a preparation's).
type Call struct {
	Provider, Model, Outcome, Purpose string
	Duration                          time.Duration
	// Hedged: the second call of an attempt whose first ran long.
	Hedged bool
}

// Call outcomes.
const (
	CallOK            = "ok"
	CallContextLength = "context_length"
	CallRateLimited   = "rate_limited"
	CallServerError   = "server_error"
	CallUnreachable   = "unreachable"
	CallAuth          = "auth"
	CallBadRequest    = "bad_request"
	CallCancelled     = "cancelled"
	CallError         = "error"
)

// Observe has f see every model call from now on (nil: none); f must be
// quick and safe for concurrent use.
func (r *Router) Observe(f func(Call)) {
	if f == nil {
		r.observe.Store(nil)
		return
	}
	r.observe.Store(&f)
}

// outcomeOf classifies a call's error.
func outcomeOf(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return CallOK
	case errors.Is(ctx.Err(), context.Canceled):
		return CallCancelled // given up on (a hedge answered first, the request ended), whatever the transport said
	case errors.Is(err, pipeline.ErrContextLength):
		return CallContextLength
	case errors.Is(err, ErrRateLimited):
		return CallRateLimited
	case errors.Is(err, ErrUnreachable):
		return CallUnreachable
	case errors.Is(err, ErrServer):
		return CallServerError
	case errors.Is(err, ErrAuth):
		return CallAuth
	case errors.Is(err, ErrBadRequest):
		return CallBadRequest
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return CallCancelled
	}
	return CallError
}

// Option tunes a Router.
type Option func(*Router) error

// WithRetry replaces the retry policy.
func WithRetry(r Retry) Option {
	return func(rt *Router) error {
		if r.Attempts < 1 || r.Base < 0 || r.Max < r.Base {
			return fmt.Errorf("router: retry needs attempts >= 1 and 0 <= base <= max")
		}
		if r.Sleep == nil {
			r.Sleep = sleep
		}
		rt.retry = r
		return nil
	}
}

// WithTimeout sets the limit of one provider call (default 60 s).
func WithTimeout(d time.Duration) Option {
	return func(rt *Router) error {
		if d <= 0 {
			return fmt.Errorf("router: timeout must be positive")
		}
		rt.timeout = d
		return nil
	}
}

// WithHedge replaces the hedging policy (a zero Factor: no hedging).
func WithHedge(h Hedge) Option {
	return func(rt *Router) error {
		if h.Factor < 0 || h.Floor < 0 || h.MinSamples < 0 || h.Cold < 0 {
			return errors.New("router: hedge factor, floor, samples and cold wait must not be negative")
		}
		rt.hedge = h
		return nil
	}
}

// WithModels sets the model table used to find a model's provider.
func WithModels(t *models.Table) Option {
	return func(rt *Router) error {
		if t == nil {
			return errors.New("router: nil model table")
		}
		rt.table = t
		return nil
	}
}

// New returns a router over providers; def names the one used when neither
// the request nor the model table picks a configured provider.
func New(def string, providers []Provider, opts ...Option) (*Router, error) {
	r := &Router{providers: map[string]Provider{}, def: def, table: models.Default(), retry: DefaultRetry(), timeout: 60 * time.Second, hedge: DefaultHedge()}
	for _, p := range providers {
		r.providers[p.Name()] = p
	}
	if _, ok := r.providers[def]; !ok {
		return nil, fmt.Errorf("%w: default provider %q is not configured", ErrUnknownProvider, def)
	}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Providers lists the configured provider names.
func (r *Router) Providers() []string {
	out := make([]string, 0, len(r.providers))
	for n := range r.providers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// pick chooses the provider: the request's, else the model's per the table,
// else the default — among the configured ones.
func (r *Router) pick(req pipeline.SummaryRequest) Provider {
	if p, ok := r.providers[req.Provider]; ok {
		return p
	}
	if p, ok := r.providers[r.table.Lookup(req.Model).Provider]; ok {
		return p
	}
	return r.providers[r.def]
}

// ReadsMessagesOnly implements pipeline.MessagesReader: true when the
// request's provider reads only its messages (the extractive one).
func (r *Router) ReadsMessagesOnly(req pipeline.SummaryRequest) bool {
	mr, ok := r.pick(req).(pipeline.MessagesReader)
	return ok && mr.ReadsMessagesOnly(req)
}

// RereadsAll implements pipeline.Rereader: true when the request's
// provider rereads (the extractive one).
func (r *Router) RereadsAll(req pipeline.SummaryRequest) bool {
	rr, ok := r.pick(req).(pipeline.Rereader)
	return ok && rr.RereadsAll(req)
}

// Summarize implements pipeline.Summarizer: one call through the model's
// provider, retried per the policy.
func (r *Router) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	p := r.pick(req)
	var last error
	for attempt := 0; attempt < r.retry.Attempts; attempt++ {
		if attempt > 0 {
			wait := r.retry.delay(attempt-1, last)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				break // the wait would outlive the request
			}
			if err := r.retry.Sleep(ctx, wait); err != nil {
				return pipeline.SummaryResponse{}, errors.Join(err, last)
			}
		}
		resp, err := r.attempt(ctx, p, req, attempt)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return pipeline.SummaryResponse{}, errors.Join(ctx.Err(), err)
		}
		var ae *APIError
		if !errors.As(err, &ae) || !ae.Retryable() {
			return pipeline.SummaryResponse{}, err // context length, auth, bad request: no retry
		}
		ae.Attempts = attempt + 1
		last = err
	}
	return pipeline.SummaryResponse{}, last
}

// attempt is one attempt of a summary call: one provider call, and for a
// request's call (or a preparation's a request waits for) that runs past
// hedgeAfter a second beside it, the first
// answer winning (the other is cancelled); an error only when every call
// made failed (the last one's).
func (r *Router) attempt(ctx context.Context, p Provider, req pipeline.SummaryRequest, n int) (pipeline.SummaryResponse, error) {
	after, hedge := r.hedgeAfter(p.Name(), req.Model)
	// A preparation's call is hedged only while a request waits for it.
	prep := pipeline.Purpose(ctx) == pipeline.PurposePreparation
	if !hedge {
		return r.call(ctx, p, req, n, false)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the call that lost
	type answer struct {
		resp   pipeline.SummaryResponse
		err    error
		hedged bool
	}
	answers := make(chan answer, 2)
	start := func(hedged bool) {
		go func() {
			resp, err := r.call(ctx, p, req, n, hedged)
			answers <- answer{resp, err, hedged}
		}()
	}
	start(false)
	timer := time.NewTimer(after)
	defer timer.Stop()
	running := 1
	for {
		select {
		case a := <-answers:
			running--
			// A failed hedge ends the attempt too: the first call ran
			// past the hedge time, likely hung (waiting for it would
			// wait out the call timeout), and a new attempt follows.
			if a.err == nil || running == 0 || a.hedged {
				return a.resp, a.err
			}
		case <-timer.C:
			if prep && !pipeline.Awaited(ctx) {
				timer.Reset(awaitedPoll) // no one waits for it yet
				continue
			}
			running++
			start(true)
		}
	}
}

// awaitedPoll is how often a preparation's call past its hedge time looks
// for a request waiting for it.
const awaitedPoll = 100 * time.Millisecond

// call makes one provider call within the call timeout, under a CLIENT
// span, observed; an answer adds to the provider's latency estimate.
func (r *Router) call(ctx context.Context, p Provider, req pipeline.SummaryRequest, n int, hedged bool) (pipeline.SummaryResponse, error) {
	callCtx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	// A CLIENT span per call (GenAI conventions: "chat {model}").
	callCtx, span := telemetry.Tracer().Start(callCtx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", p.Name()),
			attribute.String("gen_ai.request.model", req.Model), attribute.Int("gen_ai.request.max_tokens", req.MaxTokens),
			attribute.String("compactor.task", string(req.Task)), attribute.Int("compactor.attempt", n+1), attribute.Bool("compactor.hedged", hedged)))
	start := time.Now()
	resp, err := p.Summarize(callCtx, req)
	took := time.Since(start)
	outcome := outcomeOf(callCtx, err)
	if span.IsRecording() {
		if resp.Model != "" {
			span.SetAttributes(attribute.String("gen_ai.response.model", resp.Model))
		}
		if resp.InputTokens > 0 || resp.OutputTokens > 0 {
			span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", resp.InputTokens), attribute.Int("gen_ai.usage.output_tokens", resp.OutputTokens))
		}
		if resp.CacheReadTokens > 0 || resp.CacheWriteTokens > 0 {
			span.SetAttributes(attribute.Int("gen_ai.usage.cache_read.input_tokens", resp.CacheReadTokens),
				attribute.Int("gen_ai.usage.cache_creation.input_tokens", resp.CacheWriteTokens))
		}
		if err != nil {
			span.SetAttributes(attribute.String("error.type", outcome))
		}
		telemetry.Fail(span, err)
	}
	span.End()
	if f := r.observe.Load(); f != nil {
		// The model asked for, not the one answering (a provider names
		// a dated version): one label per configured model.
		(*f)(Call{Provider: p.Name(), Model: req.Model, Outcome: outcome, Purpose: pipeline.Purpose(ctx), Duration: took, Hedged: hedged})
	}
	if err == nil {
		r.latencyOf(p.Name(), req.Model).add(took)
	}
	return resp, err
}

// Settings configure the providers from flags, a config file and the
// environment.
type Settings struct {
	// Provider is the default provider: extractive, openai or anthropic.
	Provider string
	// BaseURL overrides the provider's endpoint (an OpenAI- or
	// Anthropic-compatible server).
	BaseURL string
	Timeout time.Duration
	Retry   *Retry
	// Hedge replaces DefaultHedge (nil: the default).
	Hedge  *Hedge
	Client *http.Client
	Models *models.Table
	// Extractive is the offline summariser; it is always configured.
	Extractive pipeline.Summarizer
	// Getenv reads API keys (OPENAI_API_KEY, ANTHROPIC_API_KEY); nil means
	// os.Getenv.
	Getenv func(string) string
}

// FromSettings builds a router with the extractive provider and the
// configured default provider. A provider that needs a key (OpenAI's or
// Anthropic's own endpoint) without one is an error now, not at the first
// request.
func FromSettings(s Settings) (*Router, error) {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if s.Provider == "" {
		s.Provider = "extractive"
	}
	if s.Extractive == nil {
		return nil, errors.New("router: the extractive summariser is required")
	}
	providers := []Provider{named{"extractive", s.Extractive}}
	client := s.Client
	if client == nil {
		client = &http.Client{}
	}
	switch s.Provider {
	case "extractive":
	case "openai":
		p, err := NewOpenAI(s.BaseURL, getenv("OPENAI_API_KEY"), client, s.Models)
		if err != nil {
			return nil, err
		}
		providers = append(providers, p)
	case "anthropic":
		p, err := NewAnthropic(s.BaseURL, getenv("ANTHROPIC_API_KEY"), client)
		if err != nil {
			return nil, err
		}
		providers = append(providers, p)
	default:
		return nil, fmt.Errorf("%w: %q (want extractive, openai or anthropic)", ErrUnknownProvider, s.Provider)
	}
	var opts []Option
	if s.Models != nil {
		opts = append(opts, WithModels(s.Models))
	}
	if s.Timeout > 0 {
		opts = append(opts, WithTimeout(s.Timeout))
	}
	if s.Retry != nil {
		opts = append(opts, WithRetry(*s.Retry))
	}
	if s.Hedge != nil {
		opts = append(opts, WithHedge(*s.Hedge))
	}
	return New(s.Provider, providers, opts...)
}

// named gives a Summarizer a provider name.
type named struct {
	name string
	pipeline.Summarizer
}

func (n named) Name() string { return n.name }

// ReadsMessagesOnly forwards pipeline.MessagesReader.
func (n named) ReadsMessagesOnly(req pipeline.SummaryRequest) bool {
	mr, ok := n.Summarizer.(pipeline.MessagesReader)
	return ok && mr.ReadsMessagesOnly(req)
}

// RereadsAll forwards pipeline.Rereader.
func (n named) RereadsAll(req pipeline.SummaryRequest) bool {
	rr, ok := n.Summarizer.(pipeline.Rereader)
	return ok && rr.RereadsAll(req)
}

func trimSlash(u string) string { return strings.TrimRight(u, "/") }
