package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/compactor/compactor/internal/session"
)

// A request answered from a preparation: waiting for one in flight on this
// replica, taking the stored one when it still fits and is built on the
// compaction in force, topping it up with what came after it, and marking
// it used. Making a preparation is prepare.go's.

// waitFlight decides about a preparation of the session running in this
// process when a request comes. It started before the request, so when
// what it will leave fits (its summary's budget plus every raw message
// from its tail start to now) it answers sooner than a fresh summary:
// the request waits for it, and while it does the preparation's calls are
// hedged as its own would be (Awaited: a hung one does not hold it for the
// call timeout). Otherwise the request would wait for it and then
// summarise the rest anyway: the preparation is cancelled (its tokens not
// spent for nothing) and the request takes its own path. It reports
// whether there was one (what is stored may have moved since the load).
func (pp *preparations) waitFlight(ctx context.Context, p *plan) (flew bool) {
	pp.mu.Lock()
	f := pp.flights[localKey(ctx, p.sess.Record.SessionID)]
	fits := f != nil && f.planned && f.base == p.sess.Record.CompactionID && pp.willFit(p, f.tailStart, f.budget)
	pp.mu.Unlock()
	if f == nil {
		return false
	}
	if !fits {
		f.cancel()
		return true
	}
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	select {
	case <-f.done:
	case <-ctx.Done():
	}
	return true
}

// willFit reports whether a compaction whose raw tail starts at tailStart,
// with a summary of at most budget tokens, would leave the session as it
// is now within standLimit: waiting for one being prepared then pays.
func (pp *preparations) willFit(p *plan, tailStart int64, budget int) bool {
	est := p.pinnedTokens + budget + summaryFraming
	for i := range p.candidates {
		if p.candidates[i].Seq >= tailStart {
			est += p.candidates[i].Tokens
		}
	}
	return est <= pp.standLimit(p.limit)
}

// awaitPrepared waits for a preparation another replica claimed and is
// running (polling the store): it started before the request came, so it
// answers sooner than a fresh summary would. It waits while the claim
// holds (its owner renews it every claimBeat; one that died stops), and
// returns the stored preparation as it last read it.
func (pp *preparations) awaitPrepared(ctx context.Context, ps PreparedStore, p session.PreparedCompaction, wait time.Duration, bounded bool) session.PreparedCompaction {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	var expired <-chan time.Time
	if bounded { // its call may hang: the request's own is hedged
		e := time.NewTimer(wait)
		defer e.Stop()
		expired = e.C
	}
	for p.Claimed(pp.s.now(), pp.claimTTL()) {
		select {
		case <-ctx.Done():
			return p
		case <-expired:
			return p
		case <-t.C:
		}
		next, err := ps.Prepared(ctx, p.SessionID)
		if err != nil {
			return p
		}
		p = next
	}
	return p
}

// stored is the session's preparation as the request finds it: read
// beside its load (once), or again where one ran in this process
// (waitFlight: written meanwhile, perhaps).
func (pp *preparations) stored(ctx context.Context, ps PreparedStore, p *plan) (session.PreparedCompaction, error) {
	if pp.waitFlight(ctx, p) || p.prepared == nil {
		return ps.Prepared(ctx, p.sess.Record.SessionID)
	}
	r := <-p.prepared
	p.prepared = nil
	return r.p, r.err
}

// fromPrepared answers a request from the session's prepared compaction
// when it is usable (ready, built on the compaction in force): when the
// context it leaves, with the messages appended since in the raw tail,
// fits (standLimit), it is committed as it is, with no model call (done);
// else the reduction returned summarises only what the preparation left
// over, on top of its summary (a top-up). A request with no usable
// preparation, or one that fails its checks now, returns nil, false: the
// blocking path.
func (pp *preparations) fromPrepared(ctx context.Context, p *plan, d Decision, req Request, res *Result) (r *reduction, done bool, err error) {
	ps, ok := pp.s.store.(PreparedStore)
	if !ok {
		return nil, false, nil
	}
	stored, err := pp.stored(ctx, ps, p)
	if err != nil {
		return nil, false, nil // none, or unreadable: the blocking path
	}
	rec := p.sess.Record
	if stored.Claimed(pp.s.now(), pp.claimTTL()) && stored.Owner != pp.owner && stored.Base == rec.CompactionID && stored.Epoch == rec.Epoch &&
		stored.Budget > 0 && pp.willFit(p, stored.ToSeq+1, stored.Budget) {
		// Another replica is preparing the session, and what it will
		// leave fits: wait for it.
		// (Its calls are not hedged for this request: it waits no
		// longer than its own call would before being hedged.)
		wait, bounded := pp.s.preparationWait(ctx, req, p.model)
		stored = pp.awaitPrepared(ctx, ps, stored, wait, bounded)
	}
	if rb, ok := rebased(stored, rec, p.sess.Summary); ok {
		stored = rb
	}
	if !stored.Usable(rec) || pp.tooOld(stored) || pp.overCap(stored) {
		pp.retire(ctx, ps, stored, rec)
		return nil, false, nil
	}
	m := *stored.Compaction
	meta := *m.Compaction
	m.Compaction = &meta
	age := pp.s.now().Sub(stored.ReadyAt).Milliseconds()
	p2 := pp.s.withPrepared(p, &m)
	// It fits when it leaves the context within standLimit: what it was
	// planned for, or halfway from the target to the limit, as a
	// clearing stands.
	target := pp.standLimit(p.limit)
	fitsCount := pp.s.cfg.MaxMessages <= 0 || len(p2.before) <= pp.s.cfg.MaxMessages
	if p2.beforeTokens > target || !fitsCount {
		return pp.topUp(p, p2, d, stored, age)
	}
	if err := Verify(VerifyInput{Before: p.before, After: p2.before, Pinned: p.pinned, BeforeTokens: p.beforeTokens, AfterTokens: p2.beforeTokens,
		Limit: p.limit, Summary: true, MessageTokens: m.Tokens, MaxSummaryTokens: pp.s.cfg.MaxSummaryTokens}); err != nil {
		pp.s.log.LogAttrs(ctx, slog.LevelDebug, "prepared compaction fails its checks now; compacting anew", slog.String("session_id", req.SessionID), slog.String("error", err.Error()))
		return nil, false, nil
	}
	if err := pp.s.checkProgress(d, p.beforeTokens, p2.beforeTokens, len(p2.before)); err != nil {
		return nil, false, nil
	}
	meta.RequestID = req.ID
	meta.TokensBefore, meta.TokensAfter = p.beforeTokens, p2.beforeTokens
	meta.PrefixKeptTokens = PrefixKept(p.before, p2.before)
	c := commitFor(req.SessionID, &m, pp.s.now().UTC())
	base := rec
	c.Base = &base
	res.IdempotencyKey = meta.IdempotencyKey
	existed, err := pp.s.commit(ctx, c)
	if err != nil && !errors.Is(err, errWonByOther) {
		return nil, true, err
	}
	res.CompactionMessageID, res.TailStartID, res.SummaryModel = m.ID, meta.TailStartID, meta.Model
	res.MessagesSummarised, res.TokensAfter, res.SummaryTokens, res.Summary = meta.Messages, p2.beforeTokens, meta.SummaryTokens, meta.SummaryText
	res.Incremental, res.Chunks, res.PrefixKeptTokens = meta.Incremental, meta.Chunks, meta.PrefixKeptTokens
	res.InstructionsDropped = meta.InstructionsDropped
	res.Outcome, res.Strategy, res.PreparedAgeMS = OutcomeCompacted, "prepared", age
	if err != nil || existed {
		_, mine := pp.s.madeBy(ctx, req.SessionID, m.ID, req.ID)
		if !mine || existed {
			res.Outcome, res.Strategy, res.PreparedAgeMS = OutcomeAlreadyCompacted, StrategyExisting, 0
			if mine {
				res.Outcome, res.Strategy = OutcomeCompacted, StrategyRedelivered
			}
			return nil, true, nil
		}
		// This request wrote the compaction and another committed the
		// record to it: it is what this request did.
	}
	pp.stats.used.Add(1)
	pp.markUsed(ctx, ps, stored)
	return nil, true, nil
}

// topUp plans a compaction from the prepared one: what the preparation
// summarised stays summarised (its summary), and of what came after only
// what the target needs is summarised on top of it. It needs an
// incremental summary; otherwise, or when no such cut exists, the
// request takes the blocking path.
func (pp *preparations) topUp(p, p2 *plan, d Decision, stored session.PreparedCompaction, age int64) (*reduction, bool, error) {
	if !pp.s.cfg.EnableIncremental || !pp.s.cfg.has(StepSummarise) {
		return nil, false, nil
	}
	var scratch Result
	r, err := pp.s.plan(p2, d, pp.s.selectTail(p2), &scratch)
	if err != nil || r == nil {
		return nil, false, nil
	}
	meta := stored.Compaction.Compaction
	for i := range p.candidates {
		if seq := p.candidates[i].Seq; seq >= meta.FromSeq && seq <= meta.ToSeq {
			r.covered = append(r.covered, p.candidates[i])
		}
	}
	if len(r.covered) != meta.Messages {
		return nil, false, nil // the session is not as the preparation saw it
	}
	r.on, r.prepared, r.preparedAge = p2, &stored, age
	if r.step == StepClear {
		// Clearing tool results after the prepared summary is enough: no
		// model call. The compaction is the prepared summary over what
		// it covers, and the tail with the results cleared.
		r.step, r.written = StepSummarise, true
		r.selected, r.covered = r.covered, nil
		r.summary, r.summaryTokens, r.incremental = meta.SummaryText, meta.SummaryTokens, meta.Incremental
		r.budget = max(r.budget, meta.SummaryTokens)
	}
	return r, false, nil
}

// overCap reports whether a preparation's compaction message is over
// max_summary_tokens (written before it was lowered).
func (pp *preparations) overCap(stored session.PreparedCompaction) bool {
	return stored.Compaction != nil && stored.Compaction.Tokens > pp.s.cfg.MaxSummaryTokens
}

// withPrepared is the plan of the session as it would be with prepared
// compaction m committed: pinned, m's summary, and every raw message
// from m's tail start on (those appended since too), cleared as m says.
func (s *Service) withPrepared(p *plan, m *session.Message) *plan {
	meta := m.Compaction
	pinned := make(map[int64]bool, len(p.pinned))
	for i := range p.pinned {
		pinned[p.pinned[i].Seq] = true
	}
	var raw []session.Message
	for i := range p.sess.Messages {
		if mm := p.sess.Messages[i]; mm.Seq >= meta.TailStartSeq && !pinned[mm.Seq] {
			raw = append(raw, mm)
		}
	}
	sess := *p.sess
	sess.Summary = m
	sess.Messages = append(append([]session.Message(nil), p.pinned...), raw...)
	sess.Summarised = nil
	p.counter.Ensure(m)
	p2 := &plan{sess: &sess, counter: p.counter, model: p.model, limit: p.limit, pinned: p.pinned, pinnedTokens: p.pinnedTokens}
	p2.candidates = applyCleared(raw, meta.Cleared, p.counter.Encoding())
	for i := range p2.candidates {
		p.counter.Ensure(&p2.candidates[i])
	}
	p2.before = make([]session.Message, 0, len(p.pinned)+1+len(p2.candidates))
	p2.before = append(p2.before, p.pinned...)
	if hasSummary(m) {
		p2.before = append(p2.before, *m)
	}
	p2.before = append(p2.before, p2.candidates...)
	p2.beforeTokens = p.counter.Context(p2.before)
	return p2
}

// markUsed marks a preparation used (best effort: an unmarked one is told
// used by the record naming its compaction).
func (pp *preparations) markUsed(ctx context.Context, ps PreparedStore, p session.PreparedCompaction) {
	p.State = session.PreparedUsed
	if _, err := ps.PutPrepared(context.WithoutCancel(ctx), p); err != nil && !errors.Is(err, session.ErrConflict) {
		pp.s.log.LogAttrs(ctx, slog.LevelDebug, "mark preparation used", slog.String("session_id", p.SessionID), slog.String("error", err.Error()))
	}
}
