package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/compactor/compactor/internal/keylock"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/tokens"
)

// Service is the compaction orchestrator: it composes the stages over a
// session store, a breaker store and a summariser. It is safe for concurrent
// use; compactions of one session are serialised within the process, and
// across processes the store's compare-and-set and the idempotency key keep
// exactly one compaction.
type Service struct {
	store    SessionStore
	breakers BreakerStore
	sum      Summarizer
	cfg      Config
	table    *models.Table
	log      *slog.Logger
	now      func() time.Time

	// locks serialises the requests on one session (localKey) here.
	locks keylock.Locks
	// preps is the preparing side (prepare.go).
	preps *preparations
	// policies are the tenants' (SetTenantPolicies).
	policies atomic.Pointer[map[string]TenantPolicy]
	// quota answers the tenants' model quotas (WithModelBudget).
	quota ModelBudget
}

// ModelBudget answers a tenant's quotas of summary model use
// (quota.Quotas): Take before each call (an error refuses it: a
// *tenant.QuotaError fails the compaction with quota_exceeded), Used after
// with its tokens, input and output.
type ModelBudget interface {
	Take(ctx context.Context) error
	Used(ctx context.Context, tokens int)
}

// WithModelBudget has every summary model call taken from its tenant's
// budget first. A summariser that calls no model (a Rereader) is not
// counted.
func WithModelBudget(b ModelBudget) Option {
	return func(s *Service) error {
		s.quota = b
		return nil
	}
}

// Option tunes a Service.
type Option func(*Service) error

// WithModels replaces the shipped model table.
func WithModels(t *models.Table) Option {
	return func(s *Service) error {
		if t == nil {
			return errors.New("pipeline: nil model table")
		}
		s.table = t
		return nil
	}
}

// WithLogger sets the logger; nil discards.
func WithLogger(l *slog.Logger) Option {
	return func(s *Service) error {
		if l != nil {
			s.log = l
		}
		return nil
	}
}

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option {
	return func(s *Service) error {
		if now == nil {
			return errors.New("pipeline: nil clock")
		}
		s.now = now
		return nil
	}
}

// New returns a Service. It returns an error wrapping ErrInvalidConfig when
// cfg does not validate.
func New(store SessionStore, breakers BreakerStore, sum Summarizer, cfg Config, opts ...Option) (*Service, error) {
	if store == nil || breakers == nil || sum == nil {
		return nil, errors.New("pipeline: store, breakers and summarizer are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{store: store, breakers: breakers, sum: sum, cfg: cfg, table: models.Default(),
		log: slog.New(slog.DiscardHandler), now: time.Now}
	s.preps = newPreparations(s)
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Config returns the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// Models returns the model table the service uses.
func (s *Service) Models() *models.Table { return s.table }

// localKey names a session of ctx's tenant among the process's sessions
// (two tenants may use one session id).
func localKey(ctx context.Context, id string) string { return tenant.Key(tenant.From(ctx), id) }

// lock serialises work on one session within the process.
func (s *Service) lock(ctx context.Context, sid string) (func(), error) {
	return s.locks.Lock(ctx, localKey(ctx, sid))
}

// errReplan says a commit lost a race and the compaction should be planned
// again from a fresh read.
var errReplan = errors.New("replan")

// errWonByOther says a commit lost a race to the same compaction (same id),
// committed by another replica or an earlier delivery.
var errWonByOther = errors.New("compaction committed by another writer")

// Compact runs one compaction request and returns its result. The result is
// never nil: a failed request has Failed set and the error (an *Error whose
// Reason names the failure) is returned too. Compact is idempotent: running
// the same request again after it completed answers noop or
// already_compacted and changes nothing.
func (s *Service) Compact(ctx context.Context, req Request) (*Result, error) {
	start := s.now()
	res := &Result{SessionID: req.SessionID, Tenant: tenant.From(ctx), RequestID: req.ID, Trigger: req.Trigger}
	// An INTERNAL span per request (GenAI has no compaction operation: a
	// custom one), its steps and model calls under it.
	ctx, span := telemetry.Tracer().Start(ctx, "compact_context", trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "compact_context"), attribute.String("gen_ai.conversation.id", req.SessionID),
		attribute.String("compactor.trigger", string(req.Trigger)), attribute.String("compactor.request_id", req.ID)))
	defer span.End()
	err := s.compact(ctx, req, res)
	defer spanResult(span, res, err)
	res.DurationMS = s.now().Sub(start).Milliseconds()
	if err == nil {
		res.CacheWriteTokens = max(res.TokensAfter-res.PrefixKeptTokens, 0)
		s.log.LogAttrs(ctx, slog.LevelDebug, "compaction completed", slog.String("session_id", req.SessionID),
			slog.String("request_id", req.ID), slog.String("outcome", string(res.Outcome)))
		return res, nil
	}
	var pe *Error
	if !errors.As(err, &pe) { // cancelled or timed out mid-way: worth retrying
		pe = &Error{Reason: ReasonSummaryFailed, Retryable: true, Err: err}
	}
	res.Failed, res.Reason, res.Error, res.Retryable = true, pe.Reason, pe.Err.Error(), pe.Retryable
	if qe := (*tenant.QuotaError)(nil); errors.As(pe.Err, &qe) {
		res.Quota, res.RetryAfterMS = qe.Quota, qe.RetryAfter.Milliseconds()
	}
	res.Outcome = ""
	s.log.LogAttrs(ctx, slog.LevelDebug, "compaction failed", slog.String("session_id", req.SessionID),
		slog.String("request_id", req.ID), slog.String("reason", string(pe.Reason)), slog.String("error", res.Error))
	return res, pe
}

// spanResult sets what a request did on its span (counts and names only,
// never the messages or the summary).
func spanResult(span trace.Span, res *Result, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("compactor.outcome", string(res.Outcome)), attribute.String("compactor.strategy", res.Strategy),
		attribute.Int("compactor.tokens_before", res.TokensBefore), attribute.Int("compactor.tokens_after", res.TokensAfter),
		attribute.Int("compactor.summary_tokens", res.SummaryTokens), attribute.Int("compactor.messages_summarised", res.MessagesSummarised),
		attribute.Int("compactor.tool_results_cleared", res.ToolResultsCleared), attribute.Int("compactor.llm_calls", res.LLMCalls),
		attribute.Bool("compactor.prepared", res.Strategy == StrategyPrepared || res.Strategy == StrategyPreparedTopUp),
		attribute.Int64("compactor.prepared_age_ms", res.PreparedAgeMS), attribute.Int("compactor.breaker_failures", res.Failures),
		attribute.Bool("compactor.circuit_opened", res.CircuitOpened), attribute.Int("compactor.attempts", res.attempts))
	if res.CacheState != "" {
		span.SetAttributes(attribute.String("compactor.cache_state", res.CacheState))
	}
	if res.Failed {
		span.SetAttributes(attribute.String("compactor.reason", string(res.Reason)), attribute.Bool("compactor.retryable", res.Retryable))
		telemetry.Fail(span, err)
	}
}

// step runs one step of a request under a span of its own.
func step(ctx context.Context, name string, f func(context.Context) error) error {
	ctx, span := telemetry.Tracer().Start(ctx, name)
	defer span.End()
	err := f(ctx)
	telemetry.Fail(span, err)
	return err
}

// LogResult writes a request's result as the drivers (the consumer, the
// compactor.compact endpoint) log it: the pipeline itself logs at debug
// level only. Completed at info, failed at warn; the logger's handler adds
// the tenant and the trace from ctx.
func LogResult(ctx context.Context, log *slog.Logger, res *Result) {
	if !res.Failed {
		log.LogAttrs(ctx, slog.LevelInfo, "compaction completed", slog.String("session_id", res.SessionID),
			slog.String("request_id", res.RequestID), slog.String("outcome", string(res.Outcome)), slog.String("strategy", res.Strategy),
			slog.Int("tokens_before", res.TokensBefore), slog.Int("tokens_after", res.TokensAfter),
			slog.Int("llm_calls", res.LLMCalls), slog.Int64("duration_ms", res.DurationMS))
		return
	}
	log.LogAttrs(ctx, slog.LevelWarn, "compaction failed", slog.String("session_id", res.SessionID),
		slog.String("request_id", res.RequestID), slog.String("reason", string(res.Reason)), slog.String("error", res.Error),
		slog.Int("failures", res.Failures), slog.Bool("circuit_opened", res.CircuitOpened))
}

func (s *Service) compact(ctx context.Context, req Request, res *Result) error {
	if req.At.IsZero() {
		// No ce-time (a synchronous compact, an event without one): the
		// request is as of now, and a cache's last request after that is
		// refused as for any other (issue 42: it was let through).
		req.At = s.now()
	}
	if err := req.Validate(); err != nil {
		return &Error{Reason: ReasonInvalidRequest, Err: err}
	}
	res.CacheState = req.cacheState()
	if s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(s.cfg.Timeout))
		defer cancel()
	}
	unlock, err := s.lock(ctx, req.SessionID)
	if err != nil {
		return &Error{Reason: ReasonSummaryFailed, Retryable: true, Err: err}
	}
	defer unlock()

	// The session is read beside its breaker: the request waits on both,
	// and a breaker that refuses it only wastes the read.
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	first := s.loadAsync(loadCtx, req)
	b, err := s.admit(ctx, req, res)
	if err != nil {
		cancelLoad()
		<-first
		return err
	}
	for attempt := 0; ; attempt++ {
		res.attempts = attempt + 1
		err = s.attempt(ctx, req, res, first)
		first = nil
		if !errors.Is(err, errReplan) || attempt >= s.cfg.CommitRetries {
			break
		}
		*res = Result{SessionID: req.SessionID, Tenant: res.Tenant, RequestID: req.ID, Trigger: req.Trigger, Failures: b.Failures, CacheState: res.CacheState,
			attempts: res.attempts}
	}
	if errors.Is(err, errReplan) {
		err = fail(ReasonPersistFailed, true, ErrPersistFailed, "lost %d commit races in a row", s.cfg.CommitRetries+1)
	}
	if err == nil {
		s.succeeded(ctx, req, res, b)
		return nil
	}
	return s.failed(ctx, req, res, err)
}

// admit reads the session's breaker and says whether the request may
// run: an open breaker refuses it, unless its cooldown has passed and the
// request is the half-open probe; a redelivery of the request that opened
// it gets the same answer again.
func (s *Service) admit(ctx context.Context, req Request, res *Result) (session.Breaker, error) {
	b, err := s.breakers.Breaker(ctx, req.SessionID)
	if err != nil {
		return b, storeError(err, "read breaker")
	}
	res.Failures = b.Failures
	if b.Open() && req.ID != "" && b.OpenedBy == req.ID {
		// A redelivery of the request whose failure opened the breaker (its
		// answer was lost): the same answer, the same events.
		prev := b
		res.CircuitOpened, res.Breaker = true, &prev
		return b, openerFailure(b.LastError)
	}
	if b.Open() {
		probe := false
		if cd := time.Duration(s.cfg.BreakerCooldown); cd > 0 {
			if b, probe, err = s.breakers.Probe(ctx, req.SessionID, cd, s.now()); err != nil {
				return b, storeError(err, "breaker probe")
			}
		}
		if !probe && b.Open() { // (a reset may have closed it meanwhile)
			return b, fail(ReasonCircuitOpen, false, ErrCircuitOpen, "%d consecutive failures, last: %s; reset the breaker to compact again", b.Failures, b.LastError)
		}
	}
	return b, nil
}

// succeeded resets the breaker b of a session whose compaction succeeded
// (closing it when the request was its half-open probe).
func (s *Service) succeeded(ctx context.Context, req Request, res *Result, b session.Breaker) {
	if b.Failures > 0 || b.Open() {
		if _, rerr := s.breakers.Reset(ctx, req.SessionID, s.now()); rerr != nil {
			s.log.LogAttrs(ctx, slog.LevelDebug, "breaker reset after success failed", slog.String("session_id", req.SessionID), slog.String("error", rerr.Error()))
		} else if b.Open() {
			res.CircuitClosed = true // a half-open probe succeeded
			prev := b
			res.Breaker = &prev
		}
	}
	res.Failures = 0
}

// failed records a failure that counts in the session's breaker, and
// returns err (with the breaker's own error when it could not be
// recorded).
func (s *Service) failed(ctx context.Context, req Request, res *Result, err error) error {
	var pe *Error
	// A compaction the session's shape refuses before any model call
	// (insufficient progress planned) says nothing of the provider, costs
	// nothing, and must not lock the session: only one that spent a call
	// counts.
	if !errors.As(err, &pe) || !pe.Reason.countsAsFailure() || pe.Reason == ReasonInsufficientProgress && res.LLMCalls == 0 {
		return err
	}
	// One outage of the model counts once, however often runtimes retry
	// through it: within a cooldown of the last.
	f := session.Failure{RequestID: req.ID, Error: pe.Error(), Retryable: pe.Retryable, MaxFailures: s.cfg.MaxFailures,
		Window: time.Duration(s.cfg.BreakerCooldown)}
	nb, opened, berr := s.breakers.RecordFailure(context.WithoutCancel(ctx), req.SessionID, f, s.now())
	if berr != nil {
		return errors.Join(err, fmt.Errorf("record breaker failure: %w", berr))
	}
	// A request counted before (a redelivery) that opened the breaker then
	// reports it again: its events have deterministic ids.
	opened = opened || nb.Open() && req.ID != "" && nb.OpenedBy == req.ID
	res.Failures, res.CircuitOpened = nb.Failures, opened
	if opened {
		res.Breaker = &nb
	}
	return err
}

// storeError is the failure of a store operation: corrupt state is
// permanent, a session gone is not found, anything else (an unreachable or
// leaderless store) is worth retrying.
func storeError(err error, what string) *Error {
	switch {
	case errors.Is(err, session.ErrCorrupt):
		return &Error{Reason: ReasonCorruptSession, Err: fmt.Errorf("%w: %s: %w", ErrCorruptSession, what, err)}
	case errors.Is(err, session.ErrNotFound):
		return &Error{Reason: ReasonSessionNotFound, Err: fmt.Errorf("%w: %s: %w", ErrSessionNotFound, what, err)}
	}
	return &Error{Reason: ReasonPersistFailed, Retryable: true, Err: fmt.Errorf("%w: %s: %w", ErrPersistFailed, what, err)}
}

// openerFailure rebuilds the failure that opened a breaker from its
// recorded last error ("reason: error", as Error.Error writes it).
func openerFailure(last string) *Error {
	reason, text, ok := strings.Cut(last, ": ")
	switch r := Reason(reason); {
	case ok && r.countsAsFailure():
		sentinel := map[Reason]error{ReasonSummaryFailed: ErrSummaryFailed, ReasonInsufficientProgress: ErrInsufficientProgress,
			ReasonInvariantViolated: ErrInvariant}[r]
		return &Error{Reason: r, Retryable: r == ReasonSummaryFailed, Err: fmt.Errorf("%w (%s)", sentinel, text)}
	}
	return &Error{Reason: ReasonSummaryFailed, Retryable: true, Err: fmt.Errorf("%w (%s)", ErrSummaryFailed, last)}
}

// attempt runs one compaction on the session as it is now, by the steps of
// the package doc: overflow, select, reduce (the ladder: clear tool
// results, then summarise), assemble, verify, progress, commit. A commit
// that lost a race answers errReplan.
func (s *Service) attempt(ctx context.Context, req Request, res *Result, loaded <-chan loadedPlan) error {
	if loaded == nil {
		loaded = s.loadAsync(ctx, req)
	}
	l := <-loaded
	if l.err != nil {
		return l.err
	}
	p := l.p
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("gen_ai.request.model", p.model), attribute.Int("compactor.context_limit", p.limit))
	if s.current(p, req, res) {
		return nil // a redelivery of the request that made the compaction in force
	}
	p.cold = req.cacheState() == CacheCold
	d := s.overflow(p, req, res)
	if !d.Needed || d.Reason == DecisionEmpty {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := s.reduce(ctx, p, d, req, res)
	if r == nil {
		return err // refused, or answered (already compacted, or from a preparation)
	}
	// A compaction under this key may exist already: a replica won the
	// race (answer it), or a crash came between its write and its commit
	// (finish it).
	key := r.key(req.SessionID, p.sess.Record.HeadSeq)
	res.IdempotencyKey = key
	existing, err := s.summariseUnlessExisting(ctx, p, req, r, res, CompactionID(key))
	if existing != nil {
		return s.resume(ctx, p, existing, res)
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.prepared != nil {
		// A top-up: the compaction covers what the preparation summarised
		// and what was summarised on top of it, from the compaction in
		// force.
		r.selected = append(r.covered, r.selected...)
		res.Strategy, res.PreparedAgeMS = StrategyPreparedTopUp, r.preparedAge
		if r.written {
			res.Strategy, res.SummaryModel = StrategyPrepared, r.prepared.Compaction.Compaction.Model
		}
	}
	a := s.assemble(p, req, key, r, res)
	written := 0
	if r.step == StepSummarise {
		written = a.msg.Tokens // (a summary in force kept word for word was bounded when written)
	}
	if err := step(ctx, "verify", func(context.Context) error {
		return Verify(VerifyInput{Before: p.before, After: a.context, Pinned: p.pinned, BeforeTokens: p.beforeTokens, AfterTokens: a.tokens,
			Limit: p.limit, Summary: r.summary != "", MessageTokens: written, MaxSummaryTokens: s.cfg.MaxSummaryTokens, State: r.state})
	}); err != nil {
		return &Error{Reason: ReasonInvariantViolated, Err: err}
	}
	if err := s.checkProgress(d, p.beforeTokens, a.tokens, len(a.context)); err != nil {
		return err
	}
	if err := step(ctx, "commit", func(ctx context.Context) error { return s.commitResult(ctx, req, a, r, res) }); err != nil {
		return err
	}
	if r.prepared != nil && (res.Strategy == StrategyPreparedTopUp || res.Strategy == StrategyPrepared) {
		s.usedPrepared(ctx, r)
	}
	return nil
}

// summariseUnlessExisting summarises what r selects (when it is to be
// summarised) unless a compaction id exists already: a replica won the
// race (answer it), or a crash came between its write and its commit
// (finish it, without a model call); that compaction is returned. The
// store is asked only when the load could not say that nothing was
// written after the compaction in force (Settled): three round trips
// that every request paid.
func (s *Service) summariseUnlessExisting(ctx context.Context, p *plan, req Request, r *reduction, res *Result, id string) (*session.Message, error) {
	if !p.sess.Settled || id == p.sess.Record.CompactionID {
		m, err := s.store.Compaction(ctx, req.SessionID, id)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, session.ErrNotFound) {
			return nil, storeError(err, "read compaction "+id)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.step == StepSummarise && !r.written {
		return nil, step(ctx, StepSummarise, func(ctx context.Context) error { return s.summarise(ctx, r.planOf(p), req, r, res) })
	}
	return nil, nil
}

// loadedPlan is a session read and planned on (or why not).
type loadedPlan struct {
	p   *plan
	err error
}

// loadAsync reads the session (the "load" step) in a goroutine of its
// own; the channel gets its plan. The session's preparation is read
// beside it, for the plan (a request that needs a model asks for it
// next, and would wait on one more round trip: issue 43).
func (s *Service) loadAsync(ctx context.Context, req Request) <-chan loadedPlan {
	var prepared chan preparedRead
	if ps, ok := s.store.(PreparedStore); ok {
		prepared = make(chan preparedRead, 1)
		go func() {
			p, err := ps.Prepared(ctx, req.SessionID)
			prepared <- preparedRead{p, err}
		}()
	}
	out := make(chan loadedPlan, 1)
	go func() {
		var l loadedPlan
		l.err = step(ctx, "load", func(ctx context.Context) (err error) { l.p, err = s.load(ctx, req); return err })
		if l.p != nil {
			l.p.prepared = prepared
		}
		out <- l
	}()
	return out
}

// preparedRead is a session's preparation as read (or why not).
type preparedRead struct {
	p   session.PreparedCompaction
	err error
}

// reduce plans the reduction: clearing when it suffices; else, when a
// model is needed (or nothing can be planned), a prepared compaction that
// still fits answers at once or leaves only a top-up to summarise
// (clearing needs no model: it is as quick, and cuts where the session is
// now); else the summary the plan asks for. A nil reduction ends the
// attempt with the error: nil when it is answered (already compacted, or
// from a preparation).
func (s *Service) reduce(ctx context.Context, p *plan, d Decision, req Request, res *Result) (*reduction, error) {
	r, err := s.plan(p, d, s.selectTail(p), res)
	if r == nil || r.step != StepClear {
		var pr *reduction
		var done bool
		perr := step(ctx, "prepared", func(ctx context.Context) (err error) {
			pr, done, err = s.preps.fromPrepared(ctx, p, d, req, res)
			return err
		})
		if done || perr != nil {
			return nil, perr
		}
		if pr != nil {
			r, err = pr, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// usedPrepared counts a committed compaction made from a preparation, and
// marks the preparation used.
func (s *Service) usedPrepared(ctx context.Context, r *reduction) {
	if r.written {
		s.preps.stats.used.Add(1)
	} else {
		s.preps.stats.topUps.Add(1)
	}
	if ps, ok := s.store.(PreparedStore); ok {
		s.preps.markUsed(ctx, ps, *r.prepared)
	}
}

// current describes the compaction in force in res, and reports whether
// req is a redelivery of the request that made it: its answer is then what
// that request did, not what is left to do.
func (s *Service) current(p *plan, req Request, res *Result) bool {
	res.ContextLimit = p.limit
	res.TokensBefore, res.TokensAfter, res.PrefixKeptTokens = p.beforeTokens, p.beforeTokens, p.beforeTokens
	m := p.sess.Summary
	if m == nil {
		return false
	}
	res.CompactionMessageID, res.TailStartID = m.ID, p.sess.Record.TailStartID
	if hasSummary(m) {
		res.Summary = SummaryText(m)
		res.SummaryTokens = summaryTokens(p.counter, m)
	}
	meta := m.Compaction
	if meta == nil {
		return false
	}
	res.IdempotencyKey, res.SummaryModel = meta.IdempotencyKey, meta.Model
	if req.ID == "" || meta.RequestID != req.ID {
		return false
	}
	res.Outcome, res.Strategy = OutcomeCompacted, StrategyRedelivered
	res.MessagesSummarised, res.TokensBefore, res.TokensAfter = meta.Messages, meta.TokensBefore, meta.TokensAfter
	res.SummaryTokens, res.Chunks, res.LLMCalls, res.Incremental = meta.SummaryTokens, meta.Chunks, meta.LLMCalls, meta.Incremental
	res.PrefixKeptTokens, res.ToolResultsCleared, res.ClearedTokens = meta.PrefixKeptTokens, meta.ClearedNow, meta.ClearedTokens
	res.InstructionsDropped = meta.InstructionsDropped
	return true
}

// summarise writes the summary of r.selected within r.budget: a delta
// merged into the summary in force when incremental, else everything
// summarised so far again.
func (s *Service) summarise(ctx context.Context, p *plan, req Request, r *reduction, res *Result) error {
	prev := p.sess.Summary
	r.incremental = hasSummary(prev) && s.cfg.EnableIncremental && !p.reread
	input := r.selected
	if hasSummary(prev) && !r.incremental {
		input = append(withoutPinned(p.sess.Summarised, p.pinned), r.selected...)
	}
	ledgerInput := ClampToolOutputs(asStored(input, p.sess.Messages), s.cfg.ToolOutputMaxTokens)
	input = ClampToolOutputs(WithPlaceholders(input, p.counter), s.cfg.ToolOutputMaxTokens)
	pol := s.policyOf(ctx)
	sumModel := firstNonEmpty(req.SummaryModel, pol.SummaryModel, s.cfg.SummaryModel, p.model)
	inputLimit := firstPositive(req.SummaryContextLimit, pol.SummaryContextLimit, s.cfg.SummaryContextLimit, s.table.Lookup(sumModel).ContextWindow)
	provider := firstNonEmpty(req.SummaryProvider, pol.SummaryProvider, s.cfg.SummaryProvider)
	// The artifact ledger of everything the summary will cover takes its
	// share of the budget first; the summariser writes within the rest.
	var stale []string
	if hasSummary(prev) && prev.Compaction != nil {
		stale = prev.Compaction.LedgerBullets
	}
	led := s.ledgerPart(p, r, prev, ledgerInput)
	// The summariser writes within max_summary_tokens: what the ledger
	// may take beyond it at a large window is the ledger's alone.
	budget := min(r.budget-led.rendered.Tokens, s.cfg.MaxSummaryTokens)
	sm, err := newSummariser(s.sum, p.counter, sumModel, provider, budget, inputLimit, s.cfg.MaxChunkDepth, req.Focus)
	if err != nil {
		return &Error{Reason: ReasonInvalidRequest, Err: err}
	}
	if rr, ok := s.sum.(Rereader); !ok || !rr.RereadsAll(SummaryRequest{Model: sumModel, Provider: provider, Encoding: p.counter.Encoding()}) {
		sm.quota = s.quota // a model's calls, not the offline summariser's
	}
	sm.sources = instructionSources(p.pinned, input, prev)
	var text string
	strategy := StrategySingle
	if r.incremental {
		text, err = s.extend(ctx, sm, p, prev, stale, input, budget)
		strategy = StrategyIncremental
	} else {
		text, err = sm.runWithin(ctx, input, budget)
		if sm.chunks > 1 {
			strategy = StrategyChunked
		}
	}
	res.LLMCalls, res.Chunks, res.InputTokens, res.OutputTokens = sm.calls, sm.chunks, sm.inTokens, sm.outTokens
	res.SummaryModel, res.Incremental, res.Strategy = firstNonEmpty(sm.answeredBy, sumModel), r.incremental, strategy
	res.InstructionsDropped = sm.dropped
	if err != nil {
		return err
	}
	led.rendered = withoutQuotedTask(text, led.ledger, led.rendered)
	text = withLedger(p.counter, text, led.ledger, led.rendered, stale, r.budget)
	r.summary, r.summaryTokens = text, sm.count(text)
	r.ledger, r.ledgerBullets, r.state, r.instructionsDropped = led.ledger, led.rendered.All(), led.rendered.State, sm.dropped
	return nil
}

// ledgerPart is the artifact ledger of what the summary will cover (the
// summary in force's and input's), rendered within its share of r's
// budget: under roomyBudget the state shares the ledger's budget and the
// summariser keeps all the rest. None when the ledger has no share.
func (s *Service) ledgerPart(p *plan, r *reduction, prev *session.Message, input []session.Message) ledgerPart {
	var led ledgerPart
	if s.cfg.LedgerShare <= 0 {
		return led
	}
	led.ledger = ledgerOf(prev, input, after(p.sess.Messages, input), r.incremental, pinsUser(p.pinned))
	if r.budget < roomyBudget {
		led.rendered = ledger.Render(led.ledger, p.counter.Count, s.ledgerBudget(r.budget))
	} else {
		led.rendered = ledger.RenderWithState(led.ledger, p.counter.Count, s.ledgerBudget(r.budget), s.stateBudget(r.budget))
	}
	if led.ledger.Empty() {
		led.ledger = nil
	}
	return led
}

// extend summarises input as a delta merged into the summary in force
// (prev, its stale ledger bullets left out), condensed when the merge is
// over budget. The delta gets the room the summary in force leaves, so
// the joined summary mostly fits and condensing, which re-reads the whole
// summary, stays rare; where that room is under a quarter of the budget,
// the summary in force and input are summarised in one call instead. Where the
// budget shrank under the summary in force (a long pinned head and a
// longer tail at a small window), neither the delta nor the condensed
// summary gets less than a summary needs (minSummariserTokens, within the
// budget): a quarter of such a budget was too small for the template's
// headings, the answer came back empty, and every later request of the
// session failed the same way (tau-bench at 4k: 30 of blocking's 32
// failures).
func (s *Service) extend(ctx context.Context, sm *summariser, p *plan, prev *session.Message, stale []string, input []session.Message, budget int) (string, error) {
	oldSummary, _ := summary.Parse(SummaryText(prev))
	oldSummary = withoutBullets(oldSummary, stale)
	room := budget - p.counter.Count(oldSummary.Render())
	deltaTo, condenseTo := max(room, budget/4), int(s.cfg.CondenseRatio*float64(budget))
	if room < 0 {
		least := min(budget, minSummariserTokens)
		deltaTo, condenseTo = max(deltaTo, least), max(condenseTo, least)
	}
	if room < budget/4 {
		// A delta in what little room is left would leave the joined
		// summary over budget, and condensing it a second call that reads
		// both again: one call summarises the summary in force and the
		// new messages together, within the condensed size.
		in := make([]session.Message, 0, len(input)+1)
		in = append(in, session.Message{Role: session.RoleUser, IsCompaction: true,
			Content: session.TextContent(updatePreamble + oldSummary.Render())})
		return sm.runWithin(ctx, append(in, input...), condenseTo)
	}
	text, err := sm.runWithin(ctx, input, deltaTo)
	if err != nil {
		return text, err
	}
	delta, _ := summary.Parse(text)
	text = summary.Merge(oldSummary, delta).Render()
	if sm.count(text) > budget {
		return sm.condense(ctx, text, condenseTo)
	}
	return text, nil
}

type ledgerPart struct {
	ledger   *ledger.Ledger
	rendered ledger.Rendered
}

// assembled is a compaction ready to verify and commit.
type assembled struct {
	msg     session.Message
	commit  session.Commit
	context []session.Message
	tokens  int
}

// assemble builds the compaction message, its commit and the context it
// leaves: pinned, the summary (when one is in force), the raw tail with
// what is cleared shown cleared.
func (s *Service) assemble(p *plan, req Request, key string, r *reduction, res *Result) assembled {
	msg, commit := prune(pruneInput{sessionID: req.SessionID, key: key, requestID: req.ID, step: r.step, summary: r.summary,
		ledger: r.ledger, ledgerBullets: r.ledgerBullets, instructionsDropped: r.instructionsDropped,
		prev: p.sess.Summary, pinned: p.pinned, selected: r.selected, tail: r.tail, cleared: r.cleared,
		headSeq: p.sess.Record.HeadSeq, model: res.SummaryModel, incremental: r.incremental, now: s.now().UTC()})
	switch {
	case r.step == StepSummarise:
		// The summary plus a one-line preamble and the message overhead.
		msg.Tokens = p.counter.Message(&session.Message{Role: msg.Role, Content: session.TextContent(strings.SplitN(msg.Content.Text, "\n\n", 2)[0])}) + r.summaryTokens + 1
	case r.summary != "":
		msg.Tokens = p.sess.Summary.Tokens // the same message, word for word
	}
	after := make([]session.Message, 0, len(p.pinned)+1+len(r.tail))
	after = append(after, p.pinned...)
	if r.summary != "" {
		after = append(after, msg)
	}
	after = append(after, r.tail...)
	a := assembled{msg: msg, commit: commit, context: after, tokens: p.counter.Context(after)}
	meta := msg.Compaction
	meta.TokensBefore, meta.TokensAfter, meta.SummaryTokens = p.beforeTokens, a.tokens, r.summaryTokens
	meta.Chunks, meta.LLMCalls = res.Chunks, res.LLMCalls
	meta.PrefixKeptTokens = PrefixKept(p.before, after)
	if r.step == StepClear || r.written {
		meta.ClearedNow, meta.ClearedTokens = len(r.clear.Cleared), r.clear.Saved
	}
	a.commit.Compaction = msg
	base := p.sess.Record
	a.commit.Base = &base
	return a
}

// commitResult commits the compaction and answers the request: compacted,
// or, when another writer stored this very compaction first,
// already_compacted (compacted for the request the stored one names).
func (s *Service) commitResult(ctx context.Context, req Request, a assembled, r *reduction, res *Result) error {
	existed, err := s.commit(ctx, a.commit)
	if err != nil && !errors.Is(err, errWonByOther) {
		return err
	}
	meta := a.msg.Compaction
	res.CompactionMessageID, res.TailStartID = a.msg.ID, a.commit.TailStartID
	res.MessagesSummarised, res.TokensAfter, res.SummaryTokens = len(r.selected), a.tokens, r.summaryTokens
	res.PrefixKeptTokens, res.ToolResultsCleared, res.ClearedTokens = meta.PrefixKeptTokens, meta.ClearedNow, meta.ClearedTokens
	res.Summary = r.summary
	res.Outcome = OutcomeCompacted
	if r.step == StepClear {
		res.Strategy = StrategyCleared
	}
	strategy := res.Strategy
	if err != nil || existed {
		// Another writer stored this compaction (same key, same id) first:
		// it is the request named in the stored message that compacted
		// (this one, when another delivery of it won); any other request
		// answers already_compacted, so racing requests get one compacted.
		res.Outcome, res.Strategy = OutcomeAlreadyCompacted, StrategyExisting
		if stored, ok := s.madeBy(ctx, req.SessionID, a.msg.ID, req.ID); ok {
			res.Outcome, res.Strategy = OutcomeCompacted, StrategyRedelivered
			if !existed {
				// This delivery wrote the compaction and another writer
				// committed the record to it: it is what this one did.
				res.Strategy = strategy
			}
		} else if stored != nil {
			res.Summary = SummaryText(stored)
		}
	}
	return nil
}

// updatePreamble opens the summary in force where a summary call reads it
// ahead of the messages after it.
const updatePreamble = "Summary of the session before the messages below:\n\n"

// summaryFraming is the most the preamble and overhead of a compaction
// message add to its summary, whatever its seqs (framingOf is a given
// message's).
const summaryFraming = 48

// framingOf is what a compaction message summarising up to seq last adds
// to its summary: the preamble with both seqs as wide as last (a range
// starts at or before its end, and a number of fewer digits is no more
// tokens), the message's overhead, and a token the join may add.
func framingOf(c *tokens.Counter, last int64) int {
	return c.Message(&session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf(summaryPreamble, last, last))}) + 1
}

func (s *Service) checkProgress(d Decision, before, after, afterMessages int) error {
	if d.Reason == DecisionMessages && afterMessages <= s.cfg.MaxMessages {
		return nil // the count was the problem, and it is solved (Verify checked the limit and that it shrank)
	}
	if cut := float64(before-after) / float64(max(before, 1)); cut < s.cfg.MinReduction {
		return fail(ReasonInsufficientProgress, false, ErrInsufficientProgress,
			"compaction would cut %d of %d tokens (%.1f%%), less than the %.0f%% required", before-after, before, 100*cut, 100*s.cfg.MinReduction)
	}
	return nil
}

// commit writes the compaction. A lost race is answered from a fresh read:
// the winner's compaction under our id means already_compacted
// (errWonByOther; existed says whether the stored message was there before
// this commit wrote it); another compaction means plan again (errReplan). The
// write is not cancelled with ctx: once the summary exists, finishing the
// commit is cheaper than redoing it.
func (s *Service) commit(ctx context.Context, c session.Commit) (existed bool, err error) {
	existed, err = s.store.Commit(context.WithoutCancel(ctx), c)
	switch {
	case err == nil:
		return existed, nil
	case errors.Is(err, session.ErrConflict):
		sess, lerr := s.store.Load(context.WithoutCancel(ctx), c.SessionID, false)
		if lerr == nil && sess.Record.CompactionID == c.Compaction.ID {
			return existed, errWonByOther // existed: the stored message is not this commit's
		}
		return false, errReplan
	case errors.Is(err, session.ErrNotFound):
		return false, fail(ReasonSessionNotFound, false, ErrSessionNotFound, "session %s disappeared during compaction", c.SessionID)
	}
	return false, storeError(err, "commit compaction "+c.Compaction.ID)
}

// madeBy returns the stored compaction id and whether request reqID made
// it (a read error answers nil, false: already_compacted is still true).
func (s *Service) madeBy(ctx context.Context, sessionID, id, reqID string) (*session.Message, bool) {
	m, err := s.store.Compaction(context.WithoutCancel(ctx), sessionID, id)
	if err != nil {
		return nil, false
	}
	return m, reqID != "" && m.Compaction != nil && m.Compaction.RequestID == reqID
}

// resume answers a request whose compaction already exists under its key:
// committed, it is already_compacted; written but not committed (the writer
// crashed, or is committing right now), it is committed here.
func (s *Service) resume(ctx context.Context, p *plan, m *session.Message, res *Result) error {
	res.CompactionMessageID = m.ID
	res.Summary = SummaryText(m)
	res.SummaryTokens = summaryTokens(p.counter, m)
	if meta := m.Compaction; meta != nil {
		res.TailStartID, res.SummaryModel, res.Incremental = meta.TailStartID, meta.Model, meta.Incremental
		res.MessagesSummarised, res.TokensAfter, res.Chunks = meta.Messages, meta.TokensAfter, meta.Chunks
	}
	if p.sess.Record.CompactionID == m.ID {
		res.Outcome, res.Strategy = OutcomeAlreadyCompacted, StrategyExisting
		return nil
	}
	if m.Compaction == nil {
		return fail(ReasonPersistFailed, false, ErrPersistFailed, "stored compaction %s has no metadata", m.ID)
	}
	mine := m.Compaction.RequestID == "" || m.Compaction.RequestID == res.RequestID
	_, err := s.commit(ctx, commitFor(p.sess.Record.SessionID, m, s.now().UTC()))
	if errors.Is(err, errWonByOther) {
		res.Outcome, res.Strategy = OutcomeAlreadyCompacted, StrategyExisting
		if res.RequestID != "" && m.Compaction.RequestID == res.RequestID {
			res.Outcome, res.Strategy = OutcomeCompacted, StrategyRedelivered
		}
		return nil
	}
	if err != nil {
		return err
	}
	// Finishing another request's interrupted commit does not make this
	// request the one that compacted: that is the request the compaction
	// names (it answers compacted when it is redelivered).
	res.Outcome, res.Strategy = OutcomeAlreadyCompacted, StrategyResumed
	if mine {
		res.Outcome = OutcomeCompacted
	}
	return nil
}

// maxReread bounds the messages a rereading summariser summarises again
// (see Rereader): over it, a compaction merges like any other.
const maxReread = 2000

// rereads reports whether the request's summariser rereads (Rereader).
func (s *Service) rereads(ctx context.Context, req Request, model string) bool {
	rr, ok := s.sum.(Rereader)
	pol := s.policyOf(ctx)
	return ok && rr.RereadsAll(SummaryRequest{Model: firstNonEmpty(req.SummaryModel, pol.SummaryModel, s.cfg.SummaryModel, model),
		Provider: firstNonEmpty(req.SummaryProvider, pol.SummaryProvider, s.cfg.SummaryProvider)})
}

// preparationWait is how long a request waits for a preparation in flight
// (Hedger): as long as its own call would run before it is hedged; false:
// as long as the preparation runs.
func (s *Service) preparationWait(ctx context.Context, req Request, model string) (time.Duration, bool) {
	h, ok := s.sum.(Hedger)
	if !ok {
		return 0, false
	}
	pol := s.policyOf(ctx)
	return h.HedgeAfter(SummaryRequest{Model: firstNonEmpty(req.SummaryModel, pol.SummaryModel, s.cfg.SummaryModel, model),
		Provider: firstNonEmpty(req.SummaryProvider, pol.SummaryProvider, s.cfg.SummaryProvider)})
}

// TenantPolicy is what a tenant's requests use unless they name their
// own: its summary model, that model's provider and its context limit
// (empty or 0: the service's).
type TenantPolicy struct {
	SummaryModel        string `json:"summary_model,omitempty"`
	SummaryProvider     string `json:"summary_provider,omitempty"`
	SummaryContextLimit int    `json:"summary_context_limit,omitempty"`
}

// SetTenantPolicies replaces the tenants' policies (by tenant name; the
// default tenant is "_"), for the requests that start from now on.
func (s *Service) SetTenantPolicies(p map[string]TenantPolicy) {
	s.policies.Store(&p)
}

// policyOf is the policy of ctx's tenant.
func (s *Service) policyOf(ctx context.Context) TenantPolicy {
	if p := s.policies.Load(); p != nil {
		return (*p)[tenant.From(ctx)]
	}
	return TenantPolicy{}
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func firstPositive(vals ...int) int {
	for _, v := range vals {
		if v > 0 {
			return v
		}
	}
	return 0
}
