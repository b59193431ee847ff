// Package api is the NATS micro service "compactor": request/reply
// endpoints for runtimes (a synchronous compaction, creating and appending
// to sessions without knowing the KV layout, reading the context) and for
// operators (breakers). It is discoverable with `nats micro ls|info|stats`.
// State lives in KV, so any number of instances may serve; each request is
// answered by one of them (queue group).
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/transcript"
	"github.com/compactor/compactor/schemas"
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
	// Appended, when set, is told of every append applied (the session,
	// its head after it, the seq of the first message, the tokens it
	// added), for the preparer; it must not block.
	Appended func(ctx context.Context, sessionID string, head, firstSeq int64, tokens int)
	// Created, when set, is told of every session created (its head,
	// the tokens of its context as counted, its limit).
	Created func(ctx context.Context, sessionID string, head int64, tokens, limit int)
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
	run        *workers       // the goroutines operations and compactions run on
	opsWG      sync.WaitGroup // them
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
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{d: d, log: log, nc: nc, sem: make(chan struct{}, d.Workers), ops: newSlots(maxOps), run: newWorkers(workerIdle), ctx: context.WithoutCancel(ctx)}
	s.work, s.cancelWork = context.WithCancel(s.ctx)
	cfg := micro.Config{Name: contract.ServiceName, Version: d.Version,
		Description: "Keeps LLM agent sessions inside their model's context window",
		Metadata:    map[string]string{"requests": consumer.RequestStream, "results": consumer.ResultStream},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			log.Warn("micro service error", slog.String("subject", e.Subject), slog.String("error", e.Description))
		}}
	// Each endpoint's answers by code, whenever they were sent (micro
	// counts only the errors answered before a handler returns), and the
	// service-wide counters once, under the compact endpoint.
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
	svc, err := micro.AddService(nc, cfg)
	if err != nil {
		return nil, fmt.Errorf("api: add service: %w", err)
	}
	s.micro = svc
	endpoints := []struct {
		name, subject, desc string
		h                   micro.HandlerFunc
	}{
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
		{"session_delete", contract.SubjectDelete, "remove every trace of a session (messages, compactions, breaker); answers the same when repeated", s.sessionDelete},
	}
	for _, e := range endpoints {
		// Each endpoint twice: the default tenant's subject, and every
		// tenant's (tenant.<account>.<subject>, as an account's import of
		// the service's export writes it).
		for _, ep := range []struct{ name, subject, desc string }{
			{e.name, e.subject, e.desc},
			{"tenant_" + e.name, tenant.Wildcard(e.subject), "a tenant's " + e.subject + ": " + e.desc},
		} {
			if err := svc.AddEndpoint(ep.name, s.traced(ep.name, e.subject, s.tenanted(e.h)), micro.WithEndpointSubject(ep.subject),
				micro.WithEndpointMetadata(map[string]string{"description": ep.desc})); err != nil {
				_ = svc.Stop()
				return nil, fmt.Errorf("api: endpoint %s: %w", ep.name, err)
			}
		}
	}
	go func() {
		<-ctx.Done()
		_ = svc.Stop()
	}()
	return s, nil
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

// CompactRequest is the body of compactor.compact.
type CompactRequest = contract.CompactBody

type sessionRef struct {
	SessionID string `json:"session_id"`
}

// tooLarge is the error of a read whose answer is over one NATS message:
// the caller reads it in parts.
type tooLarge struct {
	bytes, room, parts int
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("the answer is %d bytes, over what one NATS message carries here (%d): read it in %d parts (the same request with \"part\": 0 to %d, and the digest the first part answers)",
		e.bytes, e.room, e.parts, e.parts-1)
}

// errorCode maps an error to a micro error code and a status: 400 for a bad
// request, 404 for an unknown session, 409 for a taken id or a moved head,
// 507 for a store with no room, 503 for what a retry may fix, 500
// otherwise.
func errorCode(err error) (contract.Code, contract.Status) {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, session.ErrInvalid), errors.Is(err, pipeline.ErrInvalidRequest), errors.Is(err, transcript.ErrFormat):
		return contract.CodeBadRequest, contract.StatusNotApplied
	case errors.Is(err, errForbidden):
		return contract.CodeForbidden, contract.StatusNotApplied
	case errors.As(err, new(*tenant.QuotaError)):
		var q *tenant.QuotaError
		if errors.As(err, &q) && q.RetryAfter <= 0 {
			return contract.CodeTooMany, contract.StatusNotApplied // a quota of what is stored: room comes with deletes
		}
		return contract.CodeTooMany, contract.StatusRetry
	case errors.Is(err, session.ErrNotFound):
		return contract.CodeNotFound, contract.StatusNotApplied
	case errors.Is(err, session.ErrExists), errors.Is(err, session.ErrHeadMoved):
		return contract.CodeConflict, contract.StatusNotApplied
	case errors.Is(err, sessions.ErrChanged):
		return contract.CodeConflict, contract.StatusRetry
	case errors.Is(err, errBusy):
		return contract.CodeTooMany, contract.StatusRetry
	case errors.As(err, new(*tooLarge)):
		return contract.CodeTooLarge, contract.StatusFailed
	case errors.Is(err, session.ErrStorageFull):
		// Nothing written; the same request passes once space is freed.
		return contract.CodeStorageFull, contract.StatusNotApplied
	case errors.Is(err, session.ErrUnavailable), errors.Is(err, session.ErrConflict), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return contract.CodeUnavailable, contract.StatusRetry
	case errors.Is(err, session.ErrCorrupt):
		return contract.CodeInternal, contract.StatusNotApplied
	}
	return contract.CodeInternal, contract.StatusFailed
}

var errBadRequest = errors.New("bad request")

// errForbidden refuses a request whose caller the server names as another
// account than its subject's tenant.
var errForbidden = errors.New("forbidden")

// errorAnswer is the code and body of an error answer.
func errorAnswer(err error) (contract.Code, []byte) {
	code, status := errorCode(err)
	body := contract.ErrorBody{Status: status, Code: code, Error: err.Error()}
	if moved := (*session.HeadMovedError)(nil); errors.As(err, &moved) {
		body.HeadSeq = &moved.Head
	}
	if big := (*tooLarge)(nil); errors.As(err, &big) {
		body.Parts = big.parts
	}
	if q := (*tenant.QuotaError)(nil); errors.As(err, &q) {
		body.Quota = q.Quota
		if q.RetryAfter > 0 {
			body.RetryAfterMS = max(q.RetryAfter.Milliseconds(), 1)
		}
	}
	data, _ := json.Marshal(body)
	return code, data
}

func (s *Server) fail(r micro.Request, err error) {
	code, data := errorAnswer(err)
	if rerr := r.Error(code.String(), events.HeaderValue(err.Error()), data); rerr != nil {
		s.log.Warn("respond", slog.String("subject", r.Subject()), slog.String("error", rerr.Error()))
	}
}

// decode reads a request's body into v: one JSON object, no field v does
// not know (a misspelt "context_limt" is refused, not ignored). Errors name
// the fields as the body does.
func decode(r micro.Request, v any) error { return decodeBody(r.Data(), v) }

func decodeBody(data []byte, v any) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty body, want a JSON object", errBadRequest)
	}
	if err := schemas.CheckKeys(data); err != nil {
		return fmt.Errorf("%w: body: %v", errBadRequest, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", errBadRequest, schemas.DescribeJSON(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: body: more than one JSON value", errBadRequest)
	}
	return nil
}

// decodeSession decodes the body into v and checks its session id (sid
// points into v); on an error it answers and returns false.
func (s *Server) decodeSession(r micro.Request, v any, sid *string) bool {
	if err := decodeSessionBody(r, v, sid); err != nil {
		s.fail(r, err)
		return false
	}
	return true
}

// decodeSessionBody decodes r's body into v and checks its session id.
func decodeSessionBody(r micro.Request, v any, sid *string) error {
	if err := decode(r, v); err != nil {
		return err
	}
	return checkSessionID(*sid)
}

func checkSessionID(sid string) error {
	if err := contract.CheckSessionID(sid); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
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

// compact runs in its own goroutine (bounded by Workers) so that a long
// compaction does not hold up the endpoint's other requests. What it
// publishes follows events.Dispose, as the durable consumer does: a
// failure a retry may fix (the store unavailable, this instance shutting
// down) publishes nothing and answers 503, so the caller's retry with the
// same request_id gets the request's one result event.
func (s *Server) compact(r micro.Request) {
	var req CompactRequest
	if err := decode(r, &req); err != nil {
		s.fail(r, err)
		return
	}
	if req.Trigger == "" {
		req.Trigger = pipeline.TriggerOverBudget
	}
	repeatable := req.RequestID != "" // a caller's id may have been answered before
	if !repeatable {
		req.RequestID = uuid.NewString()
	}
	if err := checkSessionID(req.SessionID); err != nil {
		s.fail(r, err)
		return
	}
	done := func() {}
	if s.d.Quotas != nil {
		ctx, cancel := context.WithTimeout(tenant.With(s.work, tenantOf(r)), 10*time.Second)
		var err error
		done, err = s.d.Quotas.Compact(ctx, tenantOf(r))
		cancel()
		if err != nil {
			s.fail(r, err)
			return
		}
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		done()
		if err := r.Error("503", "shutting down: retry, another instance will answer", nil); err != nil {
			s.log.Warn("respond", slog.String("subject", r.Subject()), slog.String("error", err.Error()))
		}
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	s.sem <- struct{}{}
	// The compaction runs under the request's SERVER span, a child of the
	// caller's trace (traceparent and tracestate headers, as on any NATS
	// request), and its result events carry that trace onward.
	sctx, span := keepSpan(r)
	s.run.run(func() {
		defer func() { <-s.sem; done(); s.wg.Done() }()
		ctx, cancel := context.WithTimeout(oteltrace.ContextWithSpan(tenant.With(s.work, tenantOf(r)), oteltrace.SpanFromContext(sctx)), s.d.Timeout)
		defer cancel()
		if repeatable && s.answeredBefore(ctx, r, req) {
			return
		}
		res, cerr := s.d.Pipeline.Compact(ctx, events.Request(req.RequestData, req.RequestID, req.Trigger, time.Time{}))
		telemetry.Fail(span, cerr)
		interrupted := cerr != nil && s.work.Err() != nil
		disp := events.Dispose(res, interrupted, false)
		if s.d.Observe != nil && !interrupted {
			s.d.Observe(res)
		}
		if !interrupted {
			pipeline.LogResult(ctx, s.log, res)
		}
		if disp != events.Retry {
			// A repeated request may have been answered before.
			if err := s.d.Publisher.Once(ctx, res, res.Strategy == pipeline.StrategyRedelivered); err != nil {
				s.log.Warn("result event not published", slog.String("session_id", res.SessionID), slog.String("request_id", res.RequestID), slog.String("error", err.Error()))
				disp = events.Retry // the caller's retry publishes it
			}
		}
		// The answer goes straight to the reply subject: the micro request
		// belongs to its handler, which has returned (its stats would race).
		if cerr == nil && disp == events.Answer {
			body, _ := json.Marshal(res)
			s.replyTo(r, "", "", body)
			return
		}
		body, _ := json.Marshal(events.FailedData(res))
		code := failedCode(res.Reason, res.Retryable)
		if disp == events.Retry {
			code = "503"
		}
		desc := string(res.Reason) + ": " + res.Error
		if cerr == nil { // answered, but the event could not be published
			desc = "the result could not be published: retry with the same request_id"
		}
		s.replyTo(r, code, events.HeaderValue(desc), body)
	})
}

// failedCode is the status a failed compaction is answered with.
func failedCode(reason pipeline.Reason, retryable bool) string {
	switch {
	case reason == pipeline.ReasonInvalidRequest, reason == pipeline.ReasonConfiguration:
		return "400"
	case reason == pipeline.ReasonSessionNotFound:
		return "404"
	case reason == pipeline.ReasonQuotaExceeded:
		return "429"
	case retryable || reason == pipeline.ReasonCircuitOpen:
		return "503"
	}
	return "500"
}

// answeredBefore answers a compaction request whose id was answered
// already with that stored result, whichever kind it is (a request has one
// result; to try again after a failure, send a new request_id), and
// reports whether it did. A result stream that cannot be read is a 503:
// working on the request then might give it a second, different result.
func (s *Server) answeredBefore(ctx context.Context, r micro.Request, req CompactRequest) bool {
	stored, err := s.d.Publisher.Answered(ctx, req.SessionID, req.RequestID, time.Now().Add(-consumer.DedupWindow))
	switch {
	case err != nil:
		body, _ := json.Marshal(events.Failed{SessionID: req.SessionID, RequestID: req.RequestID, Trigger: string(req.Trigger),
			Reason: string(pipeline.ReasonPersistFailed), Error: "cannot read whether the request was answered: " + err.Error(), Retryable: true})
		s.replyTo(r, "503", events.HeaderValue("cannot read whether the request was answered: retry with the same request_id"), body)
		return true
	case stored == nil:
		return false
	case !stored.Failed:
		s.replyTo(r, "", "", stored.Data)
		return true
	}
	var f events.Failed
	if err := json.Unmarshal(stored.Data, &f); err != nil {
		f = events.Failed{Reason: "unknown", Error: err.Error()}
	}
	s.replyTo(r, failedCode(pipeline.Reason(f.Reason), f.Retryable), events.HeaderValue(f.Reason+": answered before: "+f.Error), stored.Data)
	return true
}

// errNoResult: no result of the request is stored (yet).
var errNoResult = fmt.Errorf("no result stored: %w", session.ErrNotFound)

// resultGet answers the result event stored for a request sent within the
// requests' deduplication window (what a runtime whose request was a
// duplicate reads, instead of a consumer on the result stream, which the
// runtime role may not make).
func (s *Server) resultGet(r micro.Request) {
	var req contract.ResultRequest
	if !s.decodeSession(r, &req, &req.SessionID) {
		return
	}
	if req.RequestID == "" || len(req.RequestID) > contract.MaxRequestIDBytes {
		s.fail(r, fmt.Errorf("%w: request_id must be 1-%d characters", errBadRequest, contract.MaxRequestIDBytes))
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		stored, err := s.d.Publisher.Answered(ctx, req.SessionID, req.RequestID, time.Now().Add(-consumer.DedupWindow))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %v", session.ErrUnavailable, err)
		case stored == nil:
			return nil, fmt.Errorf("request %s of session %s: %w", req.RequestID, req.SessionID, errNoResult)
		case stored.Failed:
			return contract.StoredResult{Type: contract.TypeCompactionFailed, ID: contract.FailedResultID(req.RequestID), Data: stored.Data}, nil
		}
		return contract.StoredResult{Type: contract.TypeCompactionCompleted, ID: contract.RequestResultID(req.RequestID), Data: stored.Data}, nil
	})
}

func (s *Server) breakerGet(r micro.Request) {
	s.withSession(r, func(ctx context.Context, sid string) (any, error) { return s.d.Breakers.Breaker(ctx, sid) })
}

// ResetAnswer is what a breaker reset answers.
type ResetAnswer struct {
	SessionID string `json:"session_id"`
	// WasOpen says the breaker was open (CompactionCircuitClosed was
	// published).
	WasOpen  bool            `json:"was_open"`
	Previous session.Breaker `json:"previous"`
}

// ResetAllAnswer is what resetting every breaker answers.
type ResetAllAnswer struct {
	// Reset lists each breaker reset, with whether it was open.
	Reset []ResetAnswer `json:"reset"`
}

func (s *Server) breakerReset(r micro.Request) {
	var body struct {
		SessionID string `json:"session_id"`
		All       bool   `json:"all"`
	}
	if err := decode(r, &body); err != nil {
		s.fail(r, err)
		return
	}
	if body.All {
		if body.SessionID != "" {
			s.fail(r, fmt.Errorf("%w: give session_id or all, not both", errBadRequest))
			return
		}
		s.answer(r, func(ctx context.Context) (any, error) {
			return ResetAll(ctx, s.d.Sessions, s.d.Publisher, s.d.Breakers, s.log.With(callerAttrs(r)...))
		})
		return
	}
	if err := checkSessionID(body.SessionID); err != nil {
		s.fail(r, err)
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		prev, err := events.ResetBreaker(ctx, s.d.Sessions, s.d.Publisher, body.SessionID)
		if err != nil {
			return nil, err
		}
		s.log.Info("breaker reset by request", callerAttrs(r, slog.String("session_id", body.SessionID), slog.Bool("was_open", prev.Open()))...)
		return ResetAnswer{SessionID: body.SessionID, WasOpen: prev.Open(), Previous: prev}, nil
	})
}

// ResetAll resets every stored breaker (an operator's move after an
// outage), publishing CompactionCircuitClosed for each that was open.
func ResetAll(ctx context.Context, svc events.BreakerResetter, pub *events.Publisher, breakers BreakerLister, log *slog.Logger) (ResetAllAnswer, error) {
	list, err := breakers.List(ctx)
	if err != nil {
		return ResetAllAnswer{}, err
	}
	prev, err := events.ResetAll(ctx, svc, pub, list)
	out := ResetAllAnswer{Reset: make([]ResetAnswer, 0, len(prev))}
	for _, b := range prev {
		out.Reset = append(out.Reset, ResetAnswer{SessionID: b.SessionID, WasOpen: b.Open(), Previous: b})
	}
	if log != nil {
		log.Info("every breaker reset by request", slog.Int("breakers", len(out.Reset)))
	}
	return out, err
}

// PageBody asks for one page of a list.
type PageBody struct {
	Limit int    `json:"limit,omitempty"`
	After string `json:"after,omitempty"`
}

func (s *Server) breakerList(r micro.Request) {
	var b PageBody
	if len(r.Data()) > 0 {
		if err := decode(r, &b); err != nil {
			s.fail(r, err)
			return
		}
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		if b != (PageBody{}) {
			return s.d.Breakers.Page(ctx, b.After, b.Limit)
		}
		list, err := s.d.Breakers.List(ctx)
		if list == nil {
			list = []session.Breaker{}
		}
		return list, err
	})
}

// ListBody is the body of session.list.
type ListBody struct {
	PageBody
	Prefix string `json:"prefix,omitempty"`
	Model  string `json:"model,omitempty"`
	// IdleFor is a Go duration ("90m", "24h").
	IdleFor   string `json:"idle_for,omitempty"`
	Compacted *bool  `json:"compacted,omitempty"`
}

func (s *Server) sessionList(r micro.Request) {
	var b ListBody
	if len(r.Data()) > 0 {
		if err := decode(r, &b); err != nil {
			s.fail(r, err)
			return
		}
	}
	opt := session.ListOptions{After: b.After, Limit: b.Limit, Prefix: b.Prefix, Model: b.Model, Compacted: b.Compacted}
	if b.IdleFor != "" {
		d, err := time.ParseDuration(b.IdleFor)
		if err != nil {
			s.fail(r, fmt.Errorf("%w: idle_for %q is not a duration (e.g. \"24h\")", errBadRequest, b.IdleFor))
			return
		}
		opt.IdleFor = d
	}
	s.answer(r, func(ctx context.Context) (any, error) { return s.d.Sessions.List(ctx, opt) })
}

// CreateBody is the body of session.create.
type CreateBody struct {
	SessionID    string          `json:"session_id,omitempty"`
	Model        string          `json:"model,omitempty"`
	ContextLimit int             `json:"context_limit,omitempty"`
	Messages     json.RawMessage `json:"messages"`
}

func parseMessages(raw json.RawMessage, allowEmpty bool) ([]session.Message, error) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "[]" {
		if allowEmpty {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: messages is required", errBadRequest)
	}
	msgs, ok := parseAtOnce(raw)
	if !ok {
		if err := checkMessages(raw); err != nil {
			return nil, err
		}
		var err error
		if msgs, err = transcript.Parse(raw); err != nil {
			return nil, err
		}
	}
	if len(msgs) > contract.MaxMessagesPerCall {
		return nil, fmt.Errorf("%w: %d messages in one request, at most %d: send the rest with session.append", errBadRequest, len(msgs), contract.MaxMessagesPerCall)
	}
	return msgs, nil
}

func (s *Server) sessionCreate(r micro.Request) {
	s.write(r, func(ctx context.Context) (any, error) {
		var b CreateBody
		if err := decode(r, &b); err != nil {
			return nil, err
		}
		if b.SessionID != "" {
			if err := checkSessionID(b.SessionID); err != nil {
				return nil, err
			}
		}
		if isUploadRef(b.Messages) {
			return nil, fmt.Errorf("%w: a create cannot take uploads (they belong to a session): create the session, then append them", errBadRequest)
		}
		msgs, err := parseMessages(b.Messages, true)
		if err != nil {
			return nil, err
		}
		out, err := s.d.Sessions.Create(ctx, session.Record{SessionID: b.SessionID, Model: b.Model, ContextLimit: b.ContextLimit}, msgs)
		if err == nil && s.d.Created != nil {
			s.d.Created(ctx, out.SessionID, out.HeadSeq, out.Tokens, out.ContextLimit)
		}
		return out, err
	})
}

// write answers a session write (create, append, upload part) with f,
// once the tenant's write quotas admit it (answered at once, before
// anything is read or stored); f decodes the body itself, in the worker,
// so that a tenant's large bodies do not hold up the endpoint's dispatch.
func (s *Server) write(r micro.Request, f func(context.Context) (any, error)) {
	release := func() {}
	if s.d.Quotas != nil {
		var err error
		if release, err = s.d.Quotas.Writes(tenantOf(r)); err != nil {
			s.fail(r, err)
			return
		}
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		defer release()
		return f(ctx)
	})
}

// isUploadRef reports whether a messages array holds a {"upload_id"}
// element.
func isUploadRef(raw json.RawMessage) bool {
	var elems []map[string]json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return false
	}
	for _, e := range elems {
		if len(e) == 1 && e["upload_id"] != nil {
			return true
		}
	}
	return false
}

// AppendBody is the body of session.append.
type AppendBody struct {
	SessionID string          `json:"session_id"`
	Messages  json.RawMessage `json:"messages"`
	// ExpectedHeadSeq, when set, applies the append only at that head
	// (else 409, with the head in the answer).
	ExpectedHeadSeq *int64 `json:"expected_head_seq,omitempty"`
}

func (s *Server) sessionAppend(r micro.Request) {
	s.write(r, func(ctx context.Context) (any, error) {
		b, msgs, ok := decodeAppendAtOnce(r.Data())
		var ids []string
		if !ok {
			if err := decodeSessionBody(r, &b, &b.SessionID); err != nil {
				return nil, err
			}
			// Messages uploaded in parts ({"upload_id"}) take their
			// places, and are removed once appended.
			raw, uids, err := s.d.Sessions.ResolveUploads(ctx, b.SessionID, b.Messages)
			if err != nil {
				return nil, err
			}
			if msgs, err = parseMessages(raw, false); err != nil {
				return nil, err
			}
			ids = uids
		}
		out, err := s.d.Sessions.Append(ctx, b.SessionID, msgs, session.AppendOptions{ExpectedHeadSeq: b.ExpectedHeadSeq})
		if err == nil {
			s.d.Sessions.DropUploads(ctx, b.SessionID, ids)
			if s.d.Appended != nil && out.Status == sessions.StatusApplied {
				s.d.Appended(ctx, b.SessionID, out.HeadSeq, out.FirstSeq, preparer.EstimateTokens(out.Bytes))
			}
		}
		return out, err
	})
}

func (s *Server) sessionUpload(r micro.Request) {
	s.write(r, func(ctx context.Context) (any, error) {
		var b contract.UploadBody
		if err := decodeSessionBody(r, &b, &b.SessionID); err != nil {
			return nil, err
		}
		return s.d.Sessions.Upload(ctx, b.SessionID, b.UploadID, b.Part, b.Parts, b.Data)
	})
}

func (s *Server) sessionContext(r micro.Request) {
	s.paged(r, func(ctx context.Context, sid string) (any, error) { return s.d.Sessions.Context(ctx, sid) })
}

func (s *Server) sessionHistory(r micro.Request) {
	s.paged(r, func(ctx context.Context, sid string) (any, error) { return s.d.Sessions.History(ctx, sid) })
}

// paged answers f's value for a contract.PagedBody: whole when it fits one
// message, else a 413 with the number of parts, or the part asked for.
func (s *Server) paged(r micro.Request, f func(context.Context, string) (any, error)) {
	var b contract.PagedBody
	if !s.decodeSession(r, &b, &b.SessionID) {
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		v, err := f(ctx, b.SessionID)
		if err != nil {
			return nil, err
		}
		whole, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		size := s.partSize()
		if b.Part != nil {
			return sessions.Cut(whole, *b.Part, size, b.Digest)
		}
		if room := s.room(); len(whole) > room {
			return nil, &tooLarge{bytes: len(whole), room: room, parts: sessions.PartsOf(whole, size)}
		}
		return json.RawMessage(whole), nil
	})
}

// room is the most bytes an answer may have: max_payload less its
// headers and framing.
func (s *Server) room() int { return int(s.nc.MaxPayload()) - 8<<10 }

// partSize is how many bytes of an answer one part carries: base64 in a
// JSON body within room.
func (s *Server) partSize() int { return (s.room() - 1<<10) * 3 / 4 }

func (s *Server) sessionDelete(r micro.Request) {
	s.withSession(r, func(ctx context.Context, sid string) (any, error) {
		out, err := s.d.Sessions.Delete(ctx, sid)
		if err == nil {
			s.log.Info("session deleted by request", callerAttrs(r, slog.String("session_id", sid))...)
		}
		return out, err
	})
}

func (s *Server) sessionMessage(r micro.Request) {
	var b struct {
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
		Part      *int   `json:"part"`
	}
	if !s.decodeSession(r, &b, &b.SessionID) {
		return
	}
	if b.Seq < 1 {
		s.fail(r, fmt.Errorf("%w: seq must be >= 1", errBadRequest))
		return
	}
	if b.Part != nil {
		s.answer(r, func(ctx context.Context) (any, error) {
			return s.d.Sessions.MessagePart(ctx, b.SessionID, b.Seq, *b.Part)
		})
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) { return s.d.Sessions.Message(ctx, b.SessionID, b.Seq) })
}
