package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
)

// Preparation triggers.
const (
	// PrepareNearBudget: a runtime said its context nears its budget (a
	// ContextNearBudget event): prepared whatever prepare_at says.
	PrepareNearBudget = "near_budget"
	// PrepareAppend: an append went through the service; prepared only
	// when the context has passed prepare_at of its limit.
	PrepareAppend = "append"
)

// PurposePreparation names the summary calls of preparations (see
// WithPurpose): a provider client tells them apart from the calls a
// request waits for (the router sends it as the X-Compactor-Purpose
// header), so that their cost can be told apart too.
const PurposePreparation = "preparation"

type purposeKey struct{}

// WithPurpose tags ctx with what its summary calls are for.
func WithPurpose(ctx context.Context, purpose string) context.Context {
	return context.WithValue(ctx, purposeKey{}, purpose)
}

// Purpose returns what ctx's summary calls are for ("" for a request's
// compaction).
func Purpose(ctx context.Context) string {
	p, _ := ctx.Value(purposeKey{}).(string)
	return p
}

type awaitedKey struct{}

// WithAwaited marks ctx's summary calls as a preparation's that a request
// may come to wait for: waiting reports whether one does now.
func WithAwaited(ctx context.Context, waiting func() bool) context.Context {
	return context.WithValue(ctx, awaitedKey{}, waiting)
}

// Awaited reports whether a request waits for ctx's preparation now: its
// calls are then as urgent as the request's own (a Summarizer hedges
// them), though no runtime waited when they started.
func Awaited(ctx context.Context) bool {
	f, _ := ctx.Value(awaitedKey{}).(func() bool)
	return f != nil && f()
}

// PrepareRequest asks for a session's next compaction to be prepared.
type PrepareRequest struct {
	SessionID string
	// Trigger is PrepareNearBudget or PrepareAppend.
	Trigger string
	// RequestID names the ContextNearBudget event, for the logs.
	RequestID string
	// Model and ContextLimit override the session's, as in a Request.
	Model        string
	ContextLimit int
	// Measure only reads the session's context (HeadSeq, Limit,
	// TokensBefore) and prepares nothing: outcome PrepareBelow, detail
	// "measured". The preparer measures what its estimate of a session
	// stands for before it paces on it.
	Measure bool
	// Overshoot is how far past its limit the context may be when the
	// request comes: the session's biggest append, which may be the one
	// that takes it over (the preparer knows it). A preparation is
	// planned to fit with it, where one can; one that fits only at the
	// limit stands otherwise.
	Overshoot int
}

// PrepareOutcome says what one Prepare call did.
type PrepareOutcome string

// Prepare outcomes.
const (
	// PrepareDone: a compaction is prepared and stored.
	PrepareDone PrepareOutcome = "prepared"
	// PrepareBelow: the context is under prepare_at of its limit (an
	// append trigger), or over the limit already (the request is due).
	PrepareBelow PrepareOutcome = "not_due"
	// PrepareUnchanged: the stored preparation cuts the range a new one
	// would cut; it stands.
	PrepareUnchanged PrepareOutcome = "unchanged"
	// PrepareInFlight: a preparation of the session runs already, in this
	// process or another replica.
	PrepareInFlight PrepareOutcome = "in_flight"
	// PrepareNoModel: the ladder settles the compaction without a model
	// (clearing): the request does it at once, nothing to prepare.
	PrepareNoModel PrepareOutcome = "no_model_needed"
	// PrepareNothing: no compaction can be planned (no legal cut, the
	// breaker open).
	PrepareNothing PrepareOutcome = "nothing_to_prepare"
	// PrepareFailed: the summary, or its checks, failed; the failure is
	// stored (a request falls back to the blocking path) and does not
	// count against the breaker.
	PrepareFailed PrepareOutcome = "failed"
	// PrepareCancelled: a request came while it ran, and what it would
	// leave did not fit: the request took its own path (stored as failed).
	PrepareCancelled PrepareOutcome = "cancelled"
)

// Preparation is what one Prepare call did.
type Preparation struct {
	SessionID string         `json:"session_id"`
	Outcome   PrepareOutcome `json:"outcome"`
	Detail    string         `json:"detail,omitempty"`
	// FromSeq and ToSeq bound what the prepared compaction summarises.
	FromSeq int64 `json:"from_seq,omitempty"`
	ToSeq   int64 `json:"to_seq,omitempty"`
	// HeadSeq and Limit are the session's head and context limit as the
	// preparation read them (0 when it did not read the session).
	HeadSeq int64 `json:"head_seq,omitempty"`
	Limit   int   `json:"context_limit,omitempty"`
	// SessionBytes is the session's text at HeadSeq (Record.Bytes), for
	// the scheduler's estimate.
	SessionBytes int64 `json:"-"`
	// TokensBefore is the context when prepared; TokensAfter the context
	// the prepared compaction leaves then.
	TokensBefore int `json:"tokens_before,omitempty"`
	TokensAfter  int `json:"tokens_after,omitempty"`
	LLMCalls     int `json:"llm_calls,omitempty"`
	InputTokens  int `json:"summary_input_tokens,omitempty"`
	OutputTokens int `json:"summary_output_tokens,omitempty"`
	// WastedTokens are the model tokens of an unused preparation this one
	// replaced (counted once, in PrepareStats).
	WastedTokens int   `json:"wasted_tokens,omitempty"`
	DurationMS   int64 `json:"duration_ms"`
	// Cause and QueuedMS are the scheduler's (the preparer sets them):
	// why it queued the session, and how long the preparation waited
	// from that trigger to its start.
	Cause       string `json:"cause,omitempty"`
	CauseDetail string `json:"cause_detail,omitempty"`
	QueuedMS    int64  `json:"queued_ms,omitempty"`
}

// PrepareStats are the service's preparation counters since it started.
type PrepareStats struct {
	// Started preparations (claimed), and how they ended (a preparation
	// a request cancelled counts as failed).
	Started int64 `json:"started"`
	Ready   int64 `json:"ready"`
	Failed  int64 `json:"failed"`
	// Used: requests answered from a preparation at once (no model
	// call); TopUps: answered from one with only the messages since
	// summarised.
	Used   int64 `json:"used"`
	TopUps int64 `json:"topped_up"`
	// Stale: preparations found unusable (a compaction committed since,
	// or replaced by a preparation of another range) before any request
	// used them.
	Stale int64 `json:"stale"`
	// WastedTokens: summary model tokens (input and output) spent on
	// preparations never used: stale, replaced or failed.
	WastedTokens int64 `json:"wasted_tokens"`
}

// preparations is a Service's preparing side, apart from its requests:
// the preparations running in this process (flights, under mu), the
// counters, and this process's name in the claims it makes. It decides
// whether a preparation is due (due), makes one (run), and answers a
// request from one (fromPrepared, topUp), on the Service's plan
// (plan.go) and steps.
type preparations struct {
	s       *Service
	mu      sync.Mutex
	flights map[string]*flight // preparations running here, by session
	// owner names this process in the preparations it claims.
	owner string
	stats prepCounters
}

func newPreparations(s *Service) *preparations {
	return &preparations{s: s, flights: map[string]*flight{}, owner: processName()}
}

type prepCounters struct {
	started, ready, failed, used, topUps, stale, wasted atomic.Int64
}

// PrepareStats returns the preparation counters.
func (s *Service) PrepareStats() PrepareStats {
	c := &s.preps.stats
	return PrepareStats{Started: c.started.Load(), Ready: c.ready.Load(), Failed: c.failed.Load(), Used: c.used.Load(),
		TopUps: c.topUps.Load(), Stale: c.stale.Load(), WastedTokens: c.wasted.Load()}
}

// flight is a preparation running in this process. Once planned, it
// says what it will leave (under preparations.mu): the compaction in force it
// builds on, where its raw tail starts and its summary's budget, so that
// a request can tell whether waiting for it pays.
type flight struct {
	done      chan struct{}
	cancel    context.CancelFunc
	waiting   atomic.Int32 // requests waiting for it (Awaited)
	planned   bool
	base      string
	tailStart int64
	budget    int
}

// startFlight registers a preparation of the session (its localKey), with
// the context it runs under (a request may cancel it); false when one
// runs.
func (pp *preparations) startFlight(ctx context.Context, id string) (*flight, context.Context, bool) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if _, ok := pp.flights[id]; ok {
		return nil, ctx, false
	}
	f := &flight{done: make(chan struct{})}
	ctx, f.cancel = context.WithCancel(ctx)
	ctx = WithAwaited(ctx, func() bool { return f.waiting.Load() > 0 })
	pp.flights[id] = f
	return f, ctx, true
}

// fitLimit is what a preparation plans to leave once the context has
// grown to its limit: under the target, or under prepare_at of the limit.
func (pp *preparations) fitLimit(limit int) int {
	return int(max(pp.s.cfg.HeadroomRatio, pp.s.cfg.PrepareAt) * float64(limit))
}

// standLimit is what a context built from a preparation may hold to be
// committed as it is when a request comes: what the preparation planned
// for, or, as a clearing stands with no model call (plan), halfway from
// the target to the limit. An append bigger than the preparation
// foresaw (a large tool output right before the request) then costs the
// request no model call when the preparation still leaves that much room;
// the session, past prepare_at, is prepared again at once.
func (pp *preparations) standLimit(limit int) int {
	return max(pp.fitLimit(limit), (int(pp.s.cfg.HeadroomRatio*float64(limit))+limit)/2)
}

func (pp *preparations) endFlight(id string, f *flight) {
	pp.mu.Lock()
	delete(pp.flights, id)
	pp.mu.Unlock()
	f.cancel()
	close(f.done)
}

// compacting reports whether a request holds the session (its localKey)
// here.
func (s *Service) compacting(id string) bool { return s.locks.Busy(id) }

// claimBeat is how often a preparation's owner renews its claim, and
// claimStale how long a claim lasts unrenewed: a replica that died while
// preparing keeps the others off (and a request waiting) that long.
const (
	claimBeat  = time.Second
	claimStale = 3 * claimBeat
)

// claimTTL is how long a claimed preparation keeps other replicas off
// without a heartbeat.
func (pp *preparations) claimTTL() time.Duration { return claimStale }

// beat renews claim every claimBeat until stop is closed, then returns
// the claim as last written (its revision is what the final write must
// name).
func (pp *preparations) beat(ctx context.Context, ps PreparedStore, claim session.PreparedCompaction, stop <-chan struct{}) session.PreparedCompaction {
	t := time.NewTicker(claimBeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return claim
		case <-ctx.Done():
			return claim
		case <-t.C:
		}
		next := claim
		next.Heartbeat = pp.s.now().UTC()
		if w, err := ps.PutPrepared(ctx, next); err == nil {
			claim = w
		}
	}
}

// Prepare computes the session's next compaction ahead of the request
// that will need it and stores it, uncommitted: the same steps as any
// compaction (select, the ladder, summarise, assemble, verify), planned
// as if the context had already grown to its limit, so that the messages
// appended meanwhile fill the raw tail. It runs only where a model is
// needed and where the request can commit it (it must fit when the
// context reaches its limit); at most one preparation runs per session
// (claimed in the store, so across replicas), and a stored one stands
// while it will still fit: it is redone only to cut further. Prepare
// never changes the session's context, and its failures do not count
// against the breaker.
func (s *Service) Prepare(ctx context.Context, req PrepareRequest) (Preparation, error) {
	start := s.now()
	out := Preparation{SessionID: req.SessionID}
	// A root span per preparation (no request waits for it), its model
	// calls under it: a preparation's call was a parentless span naming no
	// session.
	ctx, span := telemetry.Tracer().Start(ctx, "prepare_context", trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "prepare_context"), attribute.String("gen_ai.conversation.id", req.SessionID),
		attribute.String("compactor.tenant", tenant.From(ctx)), attribute.String("compactor.trigger", req.Trigger)))
	defer span.End()
	err := s.preps.prepare(ctx, req, &out)
	span.SetAttributes(attribute.String("compactor.outcome", string(out.Outcome)))
	telemetry.Fail(span, err)
	out.DurationMS = s.now().Sub(start).Milliseconds()
	s.log.LogAttrs(ctx, slog.LevelDebug, "preparation", slog.String("session_id", req.SessionID), slog.String("trigger", req.Trigger),
		slog.String("outcome", string(out.Outcome)), slog.String("detail", out.Detail), slog.Int64("duration_ms", out.DurationMS))
	return out, err
}

func (pp *preparations) prepare(ctx context.Context, req PrepareRequest, out *Preparation) error {
	ps, ok := pp.s.store.(PreparedStore)
	if !ok {
		return errors.New("pipeline: the session store keeps no prepared compactions")
	}
	if req.SessionID == "" {
		return fmt.Errorf("%w: session_id is required", ErrInvalidRequest)
	}
	if req.Trigger != PrepareNearBudget && req.Trigger != PrepareAppend {
		return fmt.Errorf("%w: preparation trigger %q is not %s or %s", ErrInvalidRequest, req.Trigger, PrepareNearBudget, PrepareAppend)
	}
	if req.Trigger == PrepareAppend && pp.s.cfg.PrepareAt == 0 {
		out.Outcome, out.Detail = PrepareBelow, "prepare_at is 0"
		return nil
	}
	key := localKey(ctx, req.SessionID)
	f, ctx, ok := pp.startFlight(ctx, key)
	if !ok {
		out.Outcome = PrepareInFlight
		return nil
	}
	defer pp.endFlight(key, f)
	if pp.s.compacting(key) {
		// A request runs: what it commits makes a preparation planned
		// now stale. The next trigger prepares on what it leaves.
		out.Outcome, out.Detail = PrepareInFlight, "a request is compacting the session"
		return nil
	}
	if pp.s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(pp.s.cfg.Timeout))
		defer cancel()
	}
	job, err := pp.due(ctx, ps, req, out)
	if err != nil || job == nil {
		return err
	}
	pp.mu.Lock()
	f.planned, f.base, f.tailStart, f.budget = true, job.rec.CompactionID, job.rec.HeadSeq+1, job.r.budget
	if len(job.r.tail) > 0 {
		f.tailStart = job.r.tail[0].Seq
	}
	pp.mu.Unlock()
	return pp.run(ctx, ps, req, job, out)
}

// prepJob is a preparation found due: the session as planned at the
// limit (p, grown by p.growth), the summary step planned (r), and the
// preparation it replaces (stored).
type prepJob struct {
	p      *plan
	r      *reduction
	d      Decision
	rec    session.Record
	stored session.PreparedCompaction
}

// due decides whether a preparation is due, without a model call: the
// context past prepare_at (for an append) and under its limit, no
// preparation claimed or standing that will still fit at the limit, and a
// summary needed at the limit (clearing alone will not do) that makes the
// progress the request will require and fits. It returns nil, with out
// saying why, when none is.
func (pp *preparations) due(ctx context.Context, ps PreparedStore, req PrepareRequest, out *Preparation) (*prepJob, error) {
	if b, err := pp.s.breakers.Breaker(ctx, req.SessionID); err != nil {
		return nil, err
	} else if b.Open() {
		out.Outcome, out.Detail = PrepareNothing, "the session's breaker is open"
		return nil, nil
	}
	p, err := pp.s.load(ctx, Request{SessionID: req.SessionID, Model: req.Model, ContextLimit: req.ContextLimit})
	if err != nil {
		return nil, err
	}
	rec := p.sess.Record
	out.HeadSeq, out.Limit, out.TokensBefore, out.SessionBytes = rec.HeadSeq, p.limit, p.beforeTokens, rec.Bytes
	switch {
	case req.Measure:
		out.Outcome, out.Detail = PrepareBelow, "measured"
		return nil, nil
	case req.Trigger == PrepareAppend && float64(p.beforeTokens) < pp.s.cfg.PrepareAt*float64(p.limit):
		out.Outcome, out.Detail = PrepareBelow, fmt.Sprintf("%d tokens, under %.0f%% of %d", p.beforeTokens, 100*pp.s.cfg.PrepareAt, p.limit)
		return nil, nil
	case p.beforeTokens > p.limit:
		out.Outcome, out.Detail = PrepareBelow, fmt.Sprintf("%d tokens, over the limit %d: the request is due", p.beforeTokens, p.limit)
		return nil, nil
	}
	stored, err := ps.Prepared(ctx, req.SessionID)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		return nil, err
	}
	if stored.Claimed(pp.s.now(), pp.claimTTL()) {
		out.Outcome, out.Detail = PrepareInFlight, "claimed by "+stored.Owner
		return nil, nil
	}
	if rb, ok := rebased(stored, rec, p.sess.Summary); ok {
		// Stored on the clearing, so that the next clearing finds it
		// on its base too.
		if rb, err := ps.PutPrepared(ctx, rb); err == nil {
			stored = rb
		}
	}
	d := Decision{Needed: true, Reason: DecisionTokens}
	r, stands, err := pp.planGrown(p, d, stored, req.Overshoot)
	if stands {
		out.Outcome, out.FromSeq, out.ToSeq = PrepareUnchanged, stored.FromSeq, stored.ToSeq
		return nil, nil
	}
	if err != nil || r == nil {
		out.Outcome, out.Detail = PrepareNothing, "already compacted"
		if err != nil {
			out.Detail = err.Error()
		}
		return nil, nil
	}
	if r.step != StepSummarise {
		out.Outcome = PrepareNoModel
		return nil, nil
	}
	out.FromSeq, out.ToSeq = r.selected[0].Seq, r.selected[len(r.selected)-1].Seq
	if stored.Usable(rec) && !pp.tooOld(stored) && stored.FromSeq == out.FromSeq && stored.ToSeq == out.ToSeq {
		out.Outcome = PrepareUnchanged // (the same range would be cut again)
		return nil, nil
	}
	if why := pp.notWorthIt(p, r, d); why != "" {
		out.Outcome, out.Detail = PrepareNothing, why
		return nil, nil
	}
	return &prepJob{p: p, r: r, d: d, rec: rec, stored: stored}, nil
}

// planGrown plans p's compaction as if the context had grown to its
// limit and past it by overshoot (the messages to come fill the tail),
// unless the stored preparation stands: while it still fits then, it is
// redone only to cut further; where no cut fits with the overshoot, one
// that fits at the limit stands too (replanned at the limit, the cut
// moved as the session grew, and every recheck replaced it), else the plan
// is for the limit alone.
func (pp *preparations) planGrown(p *plan, d Decision, stored session.PreparedCompaction, overshoot int) (r *reduction, stands bool, err error) {
	rec := p.sess.Record
	atLimit := max(p.limit-p.beforeTokens, 0)
	p.growth = atLimit + max(overshoot, 0)
	standsAtLimit := false
	if stored.Usable(rec) && !pp.tooOld(stored) && stored.Compaction.Compaction.FromSeq > 0 {
		p2 := pp.s.withPrepared(p, stored.Compaction)
		if p2.beforeTokens+p.growth <= pp.fitLimit(p.limit) {
			return nil, true, nil
		}
		standsAtLimit = p2.beforeTokens+atLimit <= pp.fitLimit(p.limit)
	}
	r, err = pp.planAt(p, d)
	// An overshoot no cut makes room for (the pinned head and the biggest
	// append fill the window) is planned for at the limit alone, as one
	// not worth its tokens is: the settings allow a compaction, the
	// append does not.
	tooBig := errors.Is(err, ErrConfiguration) || err == nil && r != nil && r.step == StepSummarise && pp.notWorthIt(p, r, d) != ""
	if overshoot > 0 && tooBig {
		if standsAtLimit {
			return nil, true, nil
		}
		p.growth = atLimit
		r, err = pp.planAt(p, d)
	}
	return r, false, err
}

// planAt plans p's compaction at its growth (the summary step, or what
// the ladder settles without one).
func (pp *preparations) planAt(p *plan, d Decision) (*reduction, error) {
	var res Result
	return pp.s.plan(p, d, pp.s.selectTail(p), &res)
}

// notWorthIt says why the preparation r plans would spend tokens on a
// compaction nobody commits ("" when it would not): before any model call,
// with a summary as long as its budget, the compaction must make the
// progress the request will require, and fit when the context reaches its
// limit (else the request would summarise again anyway).
func (pp *preparations) notWorthIt(p *plan, r *reduction, d Decision) string {
	worst := p.pinnedTokens + r.budget + summaryFraming
	for i := range r.tail {
		worst += r.tail[i].Tokens
	}
	if err := pp.s.checkProgress(d, p.beforeTokens+p.growth, worst+p.growth, len(p.pinned)+1+len(r.tail)); err != nil {
		return err.Error()
	}
	if worst+p.growth > pp.fitLimit(p.limit) {
		return fmt.Sprintf("it would leave about %d tokens at the limit, over the %d it must fit in (pinned %d, summary %d)",
			worst+p.growth, pp.fitLimit(p.limit), p.pinnedTokens, r.budget)
	}
	return ""
}

// run makes the preparation job plans: it claims the session's
// preparation (another replica's claim wins), summarises with the claim
// kept alive, verifies the compaction as the request will, and stores it
// ready (or failed).
func (pp *preparations) run(ctx context.Context, ps PreparedStore, req PrepareRequest, job *prepJob, out *Preparation) error {
	p, r, d, rec, stored := job.p, job.r, job.d, job.rec, job.stored
	var res Result
	claim := session.PreparedCompaction{SessionID: req.SessionID, State: session.PreparedRunning, Base: rec.CompactionID, HeadSeq: rec.HeadSeq,
		FromSeq: out.FromSeq, ToSeq: out.ToSeq, Budget: r.budget, Owner: pp.owner, StartedAt: pp.s.now().UTC(), Trigger: req.Trigger, Revision: stored.Revision}
	claim, err := ps.PutPrepared(ctx, claim)
	if errors.Is(err, session.ErrConflict) {
		out.Outcome, out.Detail = PrepareInFlight, "another replica claimed it"
		return nil
	} else if err != nil {
		return err
	}
	pp.stats.started.Add(1)
	if w := unusedTokens(stored, rec); w > 0 {
		// The preparation replaced was never used.
		pp.stats.stale.Add(1)
		pp.stats.wasted.Add(int64(w))
		out.WastedTokens = w
	}
	req2 := Request{SessionID: req.SessionID, ID: req.RequestID, Model: req.Model, ContextLimit: req.ContextLimit}
	stopBeat, beaten := make(chan struct{}), make(chan session.PreparedCompaction, 1)
	go func(c session.PreparedCompaction) { beaten <- pp.beat(ctx, ps, c, stopBeat) }(claim)
	err = pp.s.summarise(WithPurpose(ctx, PurposePreparation), p, req2, r, &res)
	close(stopBeat)
	claim = <-beaten
	claim.LLMCalls, claim.InputTokens, claim.OutputTokens = res.LLMCalls, res.InputTokens, res.OutputTokens
	out.LLMCalls, out.InputTokens, out.OutputTokens = res.LLMCalls, res.InputTokens, res.OutputTokens
	if err == nil {
		a := pp.s.assemble(p, req2, r.key(req.SessionID, rec.HeadSeq), r, &res)
		a.msg.Compaction.RequestID = ""
		err = Verify(VerifyInput{Before: p.before, After: a.context, Pinned: p.pinned, BeforeTokens: p.beforeTokens, AfterTokens: a.tokens,
			Limit: p.limit, Summary: true, MessageTokens: a.msg.Tokens, MaxSummaryTokens: pp.s.cfg.MaxSummaryTokens})
		if err == nil {
			// Progress as the request will see it: both sides grown by
			// what the preparation planned for.
			err = pp.s.checkProgress(d, p.beforeTokens+p.growth, a.tokens+p.growth, len(a.context))
		}
		if err == nil {
			msg := a.msg
			claim.State, claim.Compaction, claim.ReadyAt = session.PreparedReady, &msg, pp.s.now().UTC()
			out.TokensAfter = a.tokens
		}
	}
	if err != nil {
		claim.State, claim.Error = session.PreparedFailed, err.Error()
		pp.stats.failed.Add(1)
		pp.stats.wasted.Add(int64(claim.InputTokens + claim.OutputTokens))
		out.Outcome, out.Detail = PrepareFailed, err.Error()
		if errors.Is(err, context.Canceled) {
			out.Outcome = PrepareCancelled
		}
	}
	if _, perr := ps.PutPrepared(context.WithoutCancel(ctx), claim); perr != nil {
		if err == nil {
			pp.stats.wasted.Add(int64(claim.InputTokens + claim.OutputTokens))
		}
		return errors.Join(err, fmt.Errorf("store prepared compaction: %w", perr))
	}
	if err != nil {
		return err
	}
	pp.stats.ready.Add(1)
	out.Outcome = PrepareDone
	return nil
}

// rebased is the ready preparation p moved onto the compaction in force,
// cur (rec's), when cur only cleared tool results on top of the
// compaction p was prepared on, which it reports. Clearing is what a
// request at the limit does first when it is enough (no model call, the
// context before the first cleared result left as it was), and a
// preparation had judged a summary needed there: based on the
// compaction before it, the preparation was stale at once, and the next
// request summarised anew with the model (ponyc-4593 at 8k: the
// preparation's 5,622 tokens of input lost, and a 2 s wait). What p
// summarises is still raw under cur, its summary builds on the same
// summary (a clearing keeps the one in force), and cur's placeholders
// after p's cut still stand: p with those, on cur, is the compaction p
// would be had it been prepared after the clearing.
func rebased(p session.PreparedCompaction, rec session.Record, cur *session.Message) (session.PreparedCompaction, bool) {
	if p.State != session.PreparedReady || p.Compaction == nil || p.Compaction.Compaction == nil || p.Epoch != rec.Epoch || p.HeadSeq > rec.HeadSeq ||
		p.Base == rec.CompactionID || cur == nil || cur.ID != rec.CompactionID || cur.Compaction == nil {
		return p, false
	}
	cm, meta := cur.Compaction, *p.Compaction.Compaction
	if cm.Step != StepClear || cm.Previous != p.Base || cm.SummaryToSeq >= meta.FromSeq || cm.SummaryFromSeq != meta.SummaryFromSeq && cm.SummaryToSeq > 0 {
		return p, false
	}
	type key struct {
		seq  int64
		kind string
	}
	have := make(map[key]bool, len(meta.Cleared))
	for _, c := range meta.Cleared {
		have[key{c.Seq, c.Kind}] = true
	}
	meta.Cleared = slices.Clone(meta.Cleared)
	for _, c := range cm.Cleared {
		if c.Seq >= meta.TailStartSeq && !have[key{c.Seq, c.Kind}] {
			meta.Cleared = append(meta.Cleared, c)
		}
	}
	slices.SortStableFunc(meta.Cleared, func(a, b session.Cleared) int { return cmp.Compare(a.Seq, b.Seq) })
	meta.Previous = cur.ID
	m := *p.Compaction
	m.Compaction = &meta
	p.Compaction, p.Base = &m, cur.ID
	return p, true
}

// unusedTokens are the model tokens of a stored preparation that no
// request used (0 for one used, or none).
func unusedTokens(p session.PreparedCompaction, rec session.Record) int {
	if p.State != session.PreparedReady || p.Compaction == nil || rec.CompactionID == p.Compaction.ID {
		return 0
	}
	return p.InputTokens + p.OutputTokens
}

// retire marks a ready preparation that can no longer be used stale,
// once (compare-and-set), counting its tokens as wasted unless its
// compaction is the one in force (used, and not yet marked).
func (pp *preparations) retire(ctx context.Context, ps PreparedStore, p session.PreparedCompaction, rec session.Record) {
	if p.State != session.PreparedReady || p.Epoch != rec.Epoch {
		return
	}
	used := p.Compaction != nil && rec.CompactionID == p.Compaction.ID
	w := unusedTokens(p, rec)
	p.State = session.PreparedStale
	if used {
		p.State = session.PreparedUsed
	}
	if _, err := ps.PutPrepared(context.WithoutCancel(ctx), p); err != nil {
		return
	}
	if !used {
		pp.stats.stale.Add(1)
		pp.stats.wasted.Add(int64(w))
	}
}

// tooOld reports whether a ready preparation has waited past
// prepared_max_age: it is prepared again, never applied.
func (pp *preparations) tooOld(p session.PreparedCompaction) bool {
	return pp.s.cfg.PreparedMaxAge > 0 && !p.ReadyAt.IsZero() && pp.s.now().Sub(p.ReadyAt) > time.Duration(pp.s.cfg.PreparedMaxAge)
}

// processName names this process in the preparations it claims: host,
// pid and a random suffix (a restarted process is another owner).
func processName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}
