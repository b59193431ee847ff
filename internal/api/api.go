// Package api is the NATS micro service "compactor": request/reply
// endpoints for runtimes (a synchronous compaction, creating and appending
// to sessions without knowing the KV layout, reading the context) and for
// operators (breakers). It is discoverable with `nats micro ls|info|stats`.
// State lives in KV, so any number of instances may serve; each request is
// answered by one of them (queue group).
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
)

const (
	defaultTimeout = 5 * time.Minute
	defaultWorkers = 64
)

// BreakerLister lists the stored breakers.
type BreakerLister interface {
	Breaker(ctx context.Context, sessionID string) (session.Breaker, error)
	List(ctx context.Context) ([]session.Breaker, error)
	Page(ctx context.Context, after string, limit int) (session.BreakerPage, error)
}

// Deps are what the endpoints use.
type Deps struct {
	Pipeline  *pipeline.Service
	Publisher *events.Publisher
	Sessions  *sessions.Service
	Breakers  BreakerLister
	Logger    *slog.Logger
	// Version is the service's SemVer version.
	Version string
	// Workers bounds synchronous compactions running at once (default
	// 64); more wait, and the caller's request times out if they wait too
	// long.
	Workers int
	// Timeout bounds one synchronous compaction (default 5 min).
	Timeout time.Duration
	// ShutdownGrace is how long Stop lets running synchronous compactions
	// finish before cancelling them (default 10 s); a cancelled one answers
	// a retryable failure.
	ShutdownGrace time.Duration
	// Observe, when set, sees every compaction's result (metrics).
	Observe func(*pipeline.Result)
	// Stats, when set, adds its value to the service's stats.
	Stats func() any
	// Quotas, when set, answers the tenants' quotas on compactor.compact
	// (429 quota_exceeded).
	Quotas Quotas
	// ObserveEndpoint, when set, sees every answer: the endpoint (the
	// default tenant's name of it), the answer's error code ("" for a
	// success) and how long the request took.
	ObserveEndpoint func(endpoint, code string, took time.Duration)
}

// Quotas admits a tenant's compactor.compact call and session writes
// (quota.Quotas): done and release end them.
type Quotas interface {
	Compact(ctx context.Context, t string) (done func(), err error)
	Writes(t string) (release func(), err error)
}

// workerIdle is how long a worker waits for its next operation.
const workerIdle = 30 * time.Second

// Server answers the endpoints.
type Server struct {
	d          Deps
	log        *slog.Logger
	sem        chan struct{}
	ops        *slots         // session and breaker operations running
	opsWG      sync.WaitGroup // them
	run        *workers       // the goroutines operations and compactions run on
	counts     counts         // answers by endpoint and code
	nc         *nats.Conn
	ctx        context.Context // operations: values of Start's, never cancelled
	work       context.Context // synchronous compactions: cancelled past the grace
	cancelWork context.CancelFunc
	micro      micro.Service
	wg         sync.WaitGroup
	stopOnce   sync.Once
	mu         sync.Mutex
	stopping   bool // no new synchronous compaction starts
}

// Start registers the service on nc and serves until ctx is cancelled or
// Stop is called. Compactions answered synchronously run under ctx's values
// but not its cancellation, so a shutdown lets them finish.
func Start(ctx context.Context, nc *nats.Conn, d Deps) (*Server, error) {
	if d.Pipeline == nil || d.Publisher == nil || d.Sessions == nil || d.Breakers == nil {
		return nil, errors.New("api: pipeline, publisher, sessions and breakers are required")
	}
	d.defaults()
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{d: d, log: log, nc: nc, sem: make(chan struct{}, d.Workers), ops: newSlots(maxOps), run: newWorkers(workerIdle), ctx: context.WithoutCancel(ctx)}
	s.work, s.cancelWork = context.WithCancel(s.ctx)
	svc, err := micro.AddService(nc, s.microConfig())
	if err != nil {
		return nil, fmt.Errorf("api: add service: %w", err)
	}
	s.micro = svc
	if err := s.addEndpoints(svc); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	go func() {
		<-ctx.Done()
		_ = svc.Stop()
	}()
	return s, nil
}

// defaults fills in what d leaves unset.
func (d *Deps) defaults() {
	if d.Workers <= 0 {
		d.Workers = defaultWorkers
	}
	if d.Timeout <= 0 {
		d.Timeout = defaultTimeout
	}
	if d.Version == "" {
		d.Version = "0.0.0"
	}
	if d.ShutdownGrace <= 0 {
		d.ShutdownGrace = 10 * time.Second
	}
}

// microConfig is the micro service's: its name, version and description,
// and stats with each endpoint's answers by code, whenever they were sent
// (micro counts only the errors answered before a handler returns), and
// the service-wide counters once, under the compact endpoint.
func (s *Server) microConfig() micro.Config {
	d, log := s.d, s.log
	cfg := micro.Config{Name: contract.ServiceName, Version: d.Version,
		Description: "Keeps LLM agent sessions inside their model's context window",
		Metadata:    map[string]string{"requests": consumer.RequestStream, "results": consumer.ResultStream},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			log.Warn("micro service error", slog.String("subject", e.Subject), slog.String("error", e.Description))
		}}
	cfg.StatsHandler = func(e *micro.Endpoint) any {
		st := s.counts.of(e.Name)
		if e.Name != "compact" || d.Stats == nil {
			return st
		}
		out := map[string]any{}
		b, _ := json.Marshal(d.Stats())
		_ = json.Unmarshal(b, &out)
		out["answers"], out["errors"], out["errors_by_code"] = st.Answers, st.Errors, st.ByCode
		return out
	}
	return cfg
}

// endpoint is one endpoint of the service.
type endpoint struct {
	name, subject, desc string
	h                   micro.HandlerFunc
}

// endpoints are the service's endpoints.
func (s *Server) endpoints() []endpoint {
	return []endpoint{
		{"compact", contract.SubjectCompact, "compact a session now and answer its result (the data of CompactionCompleted, or an error carrying CompactionFailed's); the result event is published too", s.compact},
		{"breaker_get", contract.SubjectBreaker, "a session's circuit breaker: {\"session_id\"}", s.breakerGet},
		{"breaker_reset", contract.SubjectReset, "close a session's breaker ({\"session_id\"}) or every open one ({\"all\": true}); publishes CompactionCircuitClosed for each that was open", s.breakerReset},
		{"breaker_list", contract.SubjectBreakers, "every stored breaker, ordered by session id; with {\"limit\", \"after\"}, one page of them: {\"breakers\", \"next\"}", s.breakerList},
		{"session_create", contract.SubjectCreate, "store a new session, all or nothing: {\"session_id\", \"model\", \"context_limit\", \"messages\"}; the same create again succeeds", s.sessionCreate},
		{"session_append", contract.SubjectAppend, "append messages at a session's head: {\"session_id\", \"messages\", \"expected_head_seq\"}; a message whose id is stored already is not appended again", s.sessionAppend},
		{"session_context", contract.SubjectContext, "what the model sees now: pinned + summary + raw tail, with tokens", s.sessionContext},
		{"session_message", contract.SubjectMessage, "one stored message, summarised or not: {\"session_id\", \"seq\"}; with \"part\", that part of its JSON (base64), for a message over one answer", s.sessionMessage},
		{"session_history", contract.SubjectHistory, "the record, every message and every compaction", s.sessionHistory},
		{"session_upload", contract.SubjectUpload, "one part of a message too large for one request: {\"session_id\", \"upload_id\", \"part\", \"parts\", \"data\" (base64 of a piece of the message's JSON)}; append it as {\"upload_id\"}", s.sessionUpload},
		{"session_list", contract.SubjectList, "a page of the stored sessions: {\"limit\" (default 100, at most 1000), \"after\" (the previous page's \"next\"), \"prefix\", \"model\", \"idle_for\" (a duration, e.g. \"24h\"), \"compacted\" (true or false)}; answers {\"sessions\", \"next\"}", s.sessionList},
		{"result_get", contract.SubjectResult, "the result event stored for a request sent within the requests' deduplication window: {\"session_id\", \"request_id\"}; answers {\"type\", \"id\", \"data\"} (CompactionCompleted or CompactionFailed), 404 when none is stored yet", s.resultGet},
		{"session_search", contract.SubjectSearch, "find a session's stored messages, whatever compaction did with them: {\"session_id\", \"query\", \"mode\" (terms, substring or regex), \"roles\", \"states\" (raw, cleared, summarised), \"from_seq\", \"to_seq\", \"limit\"}; answers the hits best first, each with a snippet (the message and a neighbour each side, within 300 tokens)", s.sessionSearch},
		{"session_expand", contract.SubjectExpand, "read back the originals behind a compaction ({\"compaction_id\"}), a tool call and its results ({\"tool_call_id\"}) or a seq range ({\"from_seq\", \"to_seq\"}), a page at a time ({\"after\": the last page's \"next\"}); each message with its state", s.sessionExpand},
		{"session_delete", contract.SubjectDelete, "remove every trace of a session (messages, compactions, breaker); answers the same when repeated", s.sessionDelete},
	}
}

// addEndpoints adds each endpoint twice: the default tenant's subject, and
// every tenant's (tenant.<account>.<subject>, as an account's import of the
// service's export writes it).
func (s *Server) addEndpoints(svc micro.Service) error {
	for _, e := range s.endpoints() {
		for _, ep := range []struct{ name, subject, desc string }{
			{e.name, e.subject, e.desc},
			{"tenant_" + e.name, tenant.Wildcard(e.subject), "a tenant's " + e.subject + ": " + e.desc},
		} {
			if err := svc.AddEndpoint(ep.name, s.traced(ep.name, e.subject, s.tenanted(e.h)), micro.WithEndpointSubject(ep.subject),
				micro.WithEndpointMetadata(map[string]string{"description": ep.desc})); err != nil {
				return fmt.Errorf("api: endpoint %s: %w", ep.name, err)
			}
		}
	}
	return nil
}

// tenanted answers a request for the tenant its subject names, once the
// server's word on the caller agrees (a request through an account's
// import carries the importing account in Nats-Request-Info, set by the
// server; one from within the service's account carries none).
func (s *Server) tenanted(h micro.HandlerFunc) micro.HandlerFunc {
	return func(r micro.Request) {
		_, _, err := tenant.Of(r.Subject(), r.Headers().Get(tenant.RequestInfoHeader))
		switch {
		case errors.Is(err, tenant.ErrNoTenant):
			s.fail(r, fmt.Errorf("%w: %v", errBadRequest, err))
		case err != nil:
			s.log.Warn("request refused", slog.String("subject", r.Subject()), slog.String("error", err.Error()))
			s.fail(r, fmt.Errorf("%w: %v", errForbidden, err))
		default:
			h(r)
		}
	}
}

// callerAttrs are a request's tenant and caller, as the server says (the
// account, and the user where the import shares it), then attrs: for the
// log of every destructive call.
func callerAttrs(r micro.Request, attrs ...any) []any {
	out := []any{slog.String("tenant", tenantOf(r))}
	if c, ok := tenant.CallerOf(r.Headers().Get(tenant.RequestInfoHeader)); ok {
		out = append(out, slog.String("caller_account", c.Account))
		if c.User != "" {
			out = append(out, slog.String("caller_user", c.User))
		}
	} else {
		out = append(out, slog.String("caller_account", "the service's own"))
	}
	return append(out, attrs...)
}

// tenantOf is the tenant of a request tenanted let through.
func tenantOf(r micro.Request) string {
	t, _, _ := tenant.Split(r.Subject())
	return t
}

// Stop stops answering (drains the endpoints), then lets the synchronous
// compactions already running finish and answer within ShutdownGrace;
// past it they are cancelled (and answer a retryable failure). It is safe
// to call more than once.
func (s *Server) Stop() error {
	err := s.micro.Stop()
	s.mu.Lock()
	s.stopping = true // requests still draining from the subscription are refused
	s.mu.Unlock()
	s.stopOnce.Do(func() {
		done := make(chan struct{})
		go func() { s.wg.Wait(); s.opsWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.d.ShutdownGrace):
			s.log.Warn("shutdown grace over: cancelling synchronous compactions")
			s.cancelWork()
			<-done
		}
		s.cancelWork()
		s.run.stop()
	})
	return err
}

// Info is the micro service's info.
func (s *Server) Info() micro.Info { return s.micro.Info() }

// replyTo answers a request after its handler returned, with the micro
// error headers when code is set.
func (s *Server) replyTo(r micro.Request, code, desc string, body []byte) {
	defer func() { answered(r, code, desc, len(body)) }()
	reply := r.Reply()
	if reply == "" {
		return
	}
	if room := s.room(); len(body) > room {
		// An answer over max_payload cannot be sent: say so instead of
		// leaving the caller to time out.
		msg := fmt.Sprintf("the answer is %d bytes, over what one NATS message carries here (%d): read a large message in parts (compactor.session.message with \"part\"), or raise the server's max_payload", len(body), room)
		body, _ = json.Marshal(contract.ErrorBody{Status: contract.StatusFailed, Code: 413, Error: msg})
		code, desc = "413", msg
	}
	m := nats.NewMsg(reply)
	m.Data = body
	if code != "" {
		m.Header.Set(micro.ErrorHeader, desc)
		m.Header.Set(micro.ErrorCodeHeader, code)
	}
	if err := s.nc.PublishMsg(m); err != nil {
		s.log.Warn("respond", slog.String("subject", reply), slog.String("error", err.Error()))
	}
}

// opTimeout bounds one session or breaker operation, retries through an
// unavailable store included.
const opTimeout = 30 * time.Second

// maxOps bounds the session and breaker operations running at once.
const maxOps = 256

// answer runs the store operation f (bounded by opTimeout) in its own
// goroutine, so that one operation waiting on the store (a failover) does
// not hold up the endpoint's other requests, and answers on the reply
// subject with its value or its error.
func (s *Server) answer(r micro.Request, f func(context.Context) (any, error)) {
	t := tenantOf(r)
	if err := s.ops.take(t); err != nil {
		s.fail(r, err)
		return
	}
	// The work runs under the request's SERVER span, which ends with its
	// answer.
	sctx, _ := keepSpan(r)
	s.opsWG.Add(1)
	s.run.run(func() {
		defer func() { s.ops.give(t); s.opsWG.Done() }()
		ctx, cancel := context.WithTimeout(oteltrace.ContextWithSpan(tenant.With(s.work, t), oteltrace.SpanFromContext(sctx)), opTimeout) // cancelled past the shutdown grace
		defer cancel()
		v, err := f(ctx)
		if err != nil {
			code, body := errorAnswer(err)
			s.replyTo(r, code.String(), events.HeaderValue(err.Error()), body)
			return
		}
		body, ok := v.(json.RawMessage) // encoded already (paged): not scanned again
		if !ok {
			if body, err = json.Marshal(v); err != nil {
				code, body := errorAnswer(err)
				s.replyTo(r, code.String(), events.HeaderValue(err.Error()), body)
				return
			}
		}
		s.replyTo(r, "", "", body)
	})
}

// withSession answers f for the body {"session_id"}.
func (s *Server) withSession(r micro.Request, f func(context.Context, string) (any, error)) {
	var ref sessionRef
	if !s.decodeSession(r, &ref, &ref.SessionID) {
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) { return f(ctx, ref.SessionID) })
}
