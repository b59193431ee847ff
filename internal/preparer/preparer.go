// Package preparer schedules the preparation of compactions
// (pipeline.Service.Prepare) in the background: it watches the appends
// that go through the service and the ContextNearBudget hints of
// runtimes, and prepares a session's next compaction once its context
// passes prepare_at of its limit, so that the over-budget request finds it
// ready and is answered without a model call.
//
// Preparations are work no runtime waits for yet, so they yield to the
// work runtimes wait for: they run on a few workers of their own, never
// hold a session against a request, and wait while the service is busy
// with requests. A session is queued once however many appends come; an
// append is checked against a running estimate of the session's context
// (its last count plus what was appended since), so that only appends
// near the threshold cost a read of the session.
package preparer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tenant"
)

// Options tune a Preparer.
type Options struct {
	// Workers run preparations at once (default 4).
	Workers int
	// Queue bounds the sessions waiting to be prepared (default 10,000);
	// a trigger for a session beyond it is dropped (counted).
	Queue int
	// Busy, when set, reports that requests use the service's capacity:
	// a preparation does not start while it says so.
	Busy func() bool
	// Recheck is how long a session whose preparation stands is left
	// alone by appends (default 10 s): its estimate cannot see the
	// compactions of other replicas, so it is read again after that.
	Recheck time.Duration
	// Logger, when set, logs failed preparations.
	Logger *slog.Logger
	// Observe, when set, sees every preparation that ran.
	Observe func(pipeline.Preparation, error)
	// Unpaced prepares every session as soon as it passes prepare_at
	// (see Appended).
	Unpaced bool
	// Now replaces time.Now, for tests.
	Now func() time.Time
}

// Stats are a Preparer's counters.
type Stats struct {
	// Triggers received (appends and hints), Queued sessions, Dropped
	// triggers (queue full), Skipped appends (under the threshold by the
	// estimate).
	Triggers int64 `json:"triggers"`
	Queued   int64 `json:"queued"`
	Dropped  int64 `json:"dropped"`
	Skipped  int64 `json:"skipped"`
	// Waiting sessions now.
	Waiting int64 `json:"waiting"`
	// Paced appends were past prepare_at but left alone: at the session's
	// pace its limit was further off than a preparation takes.
	Paced int64 `json:"paced"`
	// ReadyMS is how long a preparation takes to be ready once due, as
	// the preparer has seen (the 90th percentile of the last 20; 0 before
	// the first).
	ReadyMS int64 `json:"ready_ms"`
	// Scale is the tokens a read found appended per token the appends'
	// estimate said (EstimateTokens), over all sessions: a moving average
	// of every session's own, which is what its estimate counts with (1
	// before the first).
	Scale float64 `json:"scale"`
}

// Preparer is the scheduler. It is safe for concurrent use.
type Preparer struct {
	svc *pipeline.Service
	opt Options
	log *slog.Logger

	mu      sync.Mutex
	queue   []job
	pending map[string]bool
	// running is the sessions a worker prepares now; again, the trigger
	// that came for one meanwhile, queued when it ends (a preparation
	// running may have read the session before that trigger's append).
	running map[string]bool
	again   map[string]job
	est     map[string]*estimate
	wake    chan struct{}
	// ready is how long a preparation takes from its trigger to ready:
	// the readyQuantile of the last readyWindow made (readies, oldest
	// first; 0 before the first).
	ready   time.Duration
	readies []time.Duration
	// scale is the moving average of the sessions' scales (calibrate):
	// what a session starts with before its first measured one.
	scale float64

	triggers, queued, dropped, skipped, paced atomic.Int64
}

func (j job) key() string { return tenant.Key(j.tenant, j.sessionID) }

type job struct {
	tenant                        string
	sessionID, trigger, requestID string
	model                         string
	limit                         int
	at                            time.Time // when it was triggered
	cause                         string    // why (a Cause)
	detail                        string    // the estimate behind it
	measure                       bool      // read the session only
}

// Why a session was queued (pipeline.Preparation.Cause).
const (
	// CauseNearBudget: a runtime's ContextNearBudget.
	CauseNearBudget = "near_budget"
	// CauseUnread: the preparer has no count of the session (new to it,
	// just compacted, or an append it did not see): the preparation
	// reads one, and prepares if the session is due.
	CauseUnread = "unread"
	// CauseRecheck: a preparation stands, or the context was over its
	// limit, since longer than Recheck.
	CauseRecheck = "recheck"
	// CauseUnpaced: past prepare_at with Unpaced set, or before the
	// preparer knows its pace (no preparation made yet, or the
	// session's rate not measured yet).
	CauseUnpaced = "prepare_at"
	// CauseAppends: two of the session's biggest appends would fill
	// what is left before its limit.
	CauseAppends = "appends"

	// CausePace: at the session's rate its limit comes within the time
	// a preparation takes (with the margin).
	CausePace = "pace"
	// CauseBurst: the most the session ever appended within that time
	// would fill what is left (see burstWindow).
	CauseBurst = "burst"
	// CauseMeasure: the session's estimate passed prepare_at, but the
	// session was never measured (calibrate): its context is read, and
	// nothing prepared, before the pace is judged on it.
	CauseMeasure = "measure"
	// CauseNear: the estimate says the pace may wait, but it may err by
	// more than the room the pace leaves (see uncertainty): the context
	// is read, and prepared at once if the count says it is due.
	CauseNear = "near"
)

// estimate is what the preparer knows of a session's context: its
// tokens at head (the last count plus the appends since), its limit, and
// whether a preparation stands for it (checked at).
type estimate struct {
	// head is the session's head as far as the estimate goes, readHead
	// the head its count was read at.
	head, readHead int64
	tokens         int
	limit          int
	read           time.Time // when the count was read
	settled        time.Time // a preparation stands (or none is due) since
	// base is the count read, so that tokens-base were appended since
	// read; biggest is the largest of those appends.
	base, biggest int
	// added is what the appends since read said (EstimateTokens), before
	// scale: tokens is base plus added times scale, the tokens a read
	// finds per estimated token in this session (calibrate; 0 until
	// measured, when the preparer's average stands for it).
	added int
	scale float64
	// rate is the session's growth in tokens a second before read (0
	// until measured over paceWindow): what the pace goes by until this
	// estimate has its own (see rateOf).
	rate float64
	// peak is the biggest append the session ever made (as scaled), kept
	// across reads and compactions, as scale and rate are; burst the most
	// it appended within a preparation's time (burstWindow), kept so too,
	// and recent its appends within that time (recentSum their tokens).
	peak, burst, recentSum int
	recent                 []stamp
	// marks are the heads the appends since read left, with added after
	// each (the last maxMarks): a read that ends after more appends came
	// finds the estimate at its own head there (see learn).
	marks []mark
	// bytes is the session's text at head (Record.Bytes; 0 when not
	// known): appends made through other replicas show as a gap in the
	// seqs, and the session's bytes after the next append here say what
	// they added, with no read.
	bytes int64
}

// stamp is an append's tokens (as scaled) and when it came.
type stamp struct {
	at     time.Time
	tokens int
}

// maxRecent bounds an estimate's recent appends: a session that appends
// more often than that within a preparation's time is prepared at
// prepare_at by its rate anyway.
const maxRecent = 64

// kept is a new estimate with what e knows of the session beyond its
// count (its scale, rate, biggest append and burst), for a session read
// again or compacted.
func (e *estimate) kept(now time.Time) *estimate {
	return &estimate{scale: e.scale, rate: rateOf(e, now), peak: e.peak, burst: e.burst, recent: slices.Clone(e.recent), recentSum: e.recentSum}
}

// mark is an estimate's added once the session's head was head.
type mark struct {
	head  int64
	added int
}

// maxMarks bounds an estimate's marks: a read takes a few milliseconds,
// and a runtime appends a few hundred times a second at most.
const maxMarks = 256

// addedAt is what the appends the estimate saw added up to head (0 at
// the head read), and whether it saw that head.
func (e *estimate) addedAt(head int64) (int, bool) {
	if head == e.readHead {
		return 0, true
	}
	for _, m := range e.marks {
		if m.head == head {
			return m.added, true
		}
	}
	return 0, false
}

// maxEstimates bounds the sessions the preparer remembers.
const maxEstimates = 100_000

// New returns a preparer over svc; Run starts its workers.
func New(svc *pipeline.Service, opt Options) *Preparer {
	if opt.Workers <= 0 {
		opt.Workers = 4
	}
	if opt.Queue <= 0 {
		opt.Queue = 10_000
	}
	if opt.Recheck <= 0 {
		opt.Recheck = 10 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Preparer{svc: svc, opt: opt, log: log, pending: map[string]bool{}, running: map[string]bool{}, again: map[string]job{}, est: map[string]*estimate{}, wake: make(chan struct{}, 1)}
}

// Stats returns the counters.
func (p *Preparer) Stats() Stats {
	p.mu.Lock()
	waiting := int64(len(p.queue))
	ready, scale := p.ready, p.scale
	p.mu.Unlock()
	if scale == 0 {
		scale = 1
	}
	return Stats{Triggers: p.triggers.Load(), Queued: p.queued.Load(), Dropped: p.dropped.Load(), Skipped: p.skipped.Load(), Waiting: waiting,
		Paced: p.paced.Load(), ReadyMS: ready.Milliseconds(), Scale: scale}
}

// EstimateTokens is what an append of this many bytes of text adds to a
// context, erring high (a third of the bytes, where English text is about
// a quarter, plus a message's framing): appends are not counted on their
// path, and an estimate that runs ahead only starts a preparation's read
// of the exact count sooner.
func EstimateTokens(bytes int) int { return bytes/3 + messageFraming }

// messageFraming is what a message adds to a context beside its text, at
// most (tokens.Message: 3, a name 1 more).
const messageFraming = 4

// Append is what Appended is told of an append.
type Append struct {
	// Head is the session's head after it, FirstSeq the seq of its first
	// message.
	Head, FirstSeq int64
	// Tokens is what it added (EstimateTokens of its bytes).
	Tokens int
	// SessionBytes is the session's text after it (Record.Bytes; 0 when
	// not known).
	SessionBytes int64
}

// Appended is told of an append that went through the service (a). It
// never blocks.
//
// Appends made through other replicas leave a gap in the seqs. Where
// the session's bytes before the gap and after this append are known,
// the gap is estimated from them (EstimateTokens, and a message's
// framing each), and the estimate holds; otherwise the session is read
// (with two replicas, a read for one append in two: a session's whole
// log read again, about a third of the server's time under appends).
//
// Past prepare_at, a session is prepared when its pace says it must be:
// when the tokens still free before its limit, at the rate the session
// has grown since its count was read, would be gone within paceMargin
// times what a preparation takes to be ready (as seen here), or when
// twice its biggest append would fill them. A preparation made earlier
// leaves raw every message appended after it: committed at the limit, it
// leaves a larger context than a compaction made then, and the next one
// comes sooner (the prepared replays at 32k spent 1.28x the blocking
// mode's model input, all of it in more compactions). Before the first
// preparation, or with Unpaced, prepare_at alone decides. Once the pace
// decides, a session it has no count of, or never measured, is read
// (Measure) before it is paced.
func (p *Preparer) Appended(ctx context.Context, sessionID string, a Append) {
	p.triggers.Add(1)
	if p.svc.Config().PrepareAt == 0 {
		return
	}
	head, firstSeq, tokens := a.Head, a.FirstSeq, a.Tokens
	t := tenant.From(ctx)
	cause, detail := CauseUnread, ""
	p.mu.Lock()
	e := p.est[tenant.Key(t, sessionID)]
	if e != nil && e.head > 0 && head > e.head && firstSeq > e.head+1 && e.bytes > 0 && a.SessionBytes > e.bytes {
		// What other replicas appended since, with this append.
		tokens = EstimateTokens(int(a.SessionBytes-e.bytes)) + messageFraming*int(firstSeq-1-e.head)
		firstSeq = e.head + 1
	}
	if e != nil && e.head > 0 && head <= e.head && (e.limit == 0 || p.opt.Now().Sub(e.read) < p.opt.Recheck) {
		// Counted already: a read that ended after this append (its
		// reply and this call come after the write), or a read is
		// queued. (Past Recheck it is read: the session may have been
		// deleted and created again.)
		p.mu.Unlock()
		p.skipped.Add(1)
		return
	}
	if e != nil && e.head > 0 && head > e.head && firstSeq <= e.head+1 {
		// No append unseen since the last count: the estimate holds
		// (an append that a read counted in part errs high).
		d, c, det := p.grown(e, head, tokens)
		e.bytes = a.SessionBytes
		switch d {
		case growSkip, growPaced:
			p.mu.Unlock()
			p.skipped.Add(1)
			if d == growPaced {
				p.paced.Add(1)
			}
			return
		case growMeasure:
			p.mu.Unlock()
			p.enqueue(job{tenant: t, sessionID: sessionID, trigger: pipeline.PrepareAppend, at: p.opt.Now(), cause: c, detail: det, measure: true})
			return
		}
		cause, detail = c, det
	}
	if cause == CauseUnread {
		// Until the read ends, the appends go on an estimate without a
		// count (limit 0), which the read takes up (learn): appends
		// made while it ran would otherwise follow one the preparer
		// did not know, and be read again (a new session's first
		// appends, read five times over at a runtime's pace).
		pending := &estimate{}
		if e != nil {
			pending = e.kept(p.opt.Now())
		}
		pending.head, pending.added, pending.marks, pending.bytes = head, tokens, []mark{{head: head, added: tokens}}, a.SessionBytes
		p.remember(tenant.Key(t, sessionID), pending)
	}
	measure := cause == CauseUnread && p.pacing()
	if measure {
		// Read it, and pace from the next append: prepared on this
		// read, a session past prepare_at was prepared however far its
		// limit (a mini-swe-agent run at 32k, left at 78 % by a
		// clearing: 59 s before its request).
		cause = CauseMeasure
	}
	p.mu.Unlock()
	p.enqueue(job{tenant: t, sessionID: sessionID, trigger: pipeline.PrepareAppend, at: p.opt.Now(), cause: cause, detail: detail, measure: measure})
}

// growth is what an append on a counted estimate leads to.
type growth int

const (
	growSkip    growth = iota // the estimate holds, or the count is queued: nothing to do
	growPaced                 // the pace says not yet
	growMeasure               // read it, to measure the scale of its kind of session
	growPrepare               // read it and prepare
)

// grown adds an append of tokens up to head, seen in order, to e, and says
// what follows, with the cause and detail of a job (p.mu held).
func (p *Preparer) grown(e *estimate, head int64, tokens int) (growth, string, string) {
	scaled, now := p.scaled(e, tokens), p.opt.Now()
	e.head, e.added, e.biggest, e.peak = head, e.added+tokens, max(e.biggest, scaled), max(e.peak, scaled)
	p.addRecent(e, now, scaled)
	if len(e.marks) == maxMarks {
		e.marks = slices.Delete(e.marks, 0, 1)
	}
	e.marks = append(e.marks, mark{head: head, added: e.added})
	if e.limit == 0 {
		return growSkip, "", "" // not read yet: its read is queued, and keeps these
	}
	e.tokens = e.base + p.scaled(e, e.added)
	below := float64(e.tokens) < p.svc.Config().PrepareAt*float64(e.limit)
	// Over the limit the request is due (a compaction elsewhere may have
	// shrunk the context: read it again after Recheck); a preparation that
	// stands is left alone as long.
	over := e.tokens > e.limit && now.Sub(e.read) < p.opt.Recheck
	settled := !e.settled.IsZero() && now.Sub(e.settled) < p.opt.Recheck
	if below || over || settled {
		return growSkip, "", ""
	}
	if e.scale == 0 && e.added >= minCalibration && p.pacing() {
		// Counted with the preparer's scale, which other kinds of session
		// set (LoCoMo's chats at 8k, counted at the agent runs' 0.9 where
		// theirs is 0.7, were prepared at 80 % of their window, 30 s
		// before their request).
		return growMeasure, CauseMeasure, p.describe(e, now)
	}
	cause := CauseUnpaced
	if !p.opt.Unpaced {
		if cause = p.pace(e, now, 0); cause == "" {
			if u := p.uncertainty(e); u > 0 && p.pace(e, now, u) != "" {
				return growMeasure, CauseNear, p.describe(e, now)
			}
			return growPaced, "", ""
		}
	}
	if e.tokens > e.limit || !e.settled.IsZero() {
		cause = CauseRecheck
	}
	return growPrepare, cause, p.describe(e, now)
}

// Created is told of a session created through the service: its head,
// the tokens of its context as the create counted them, and its limit.
// The estimate starts from that count, so that the session's appends are
// not read to start one. It never blocks.
func (p *Preparer) Created(ctx context.Context, sessionID string, head int64, tokens, limit int) {
	if p.svc.Config().PrepareAt == 0 || head <= 0 || limit <= 0 {
		return
	}
	now := p.opt.Now()
	key := tenant.Key(tenant.From(ctx), sessionID)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remember(key, &estimate{head: head, readHead: head, tokens: tokens, base: tokens, limit: limit, read: now})
}

// pacing reports whether the pace decides (Unpaced is off, and a
// preparation's time to ready is known). Called with p.mu held.
func (p *Preparer) pacing() bool { return !p.opt.Unpaced && p.ready > 0 }

// Pacing (see Appended): a preparation is due when the session's limit is
// within paceMargin times a preparation's time to ready, plus paceSlack
// (the queue, a request that holds the session, a slower call).
const (
	paceMargin = 1.5
	paceSlack  = time.Second
	// paceWindow is the least time a session's rate is measured over.
	paceWindow = time.Second
)

// burstWindow is the time a session's burst is measured over: what a
// preparation takes to be ready, with the pace's margin (0 while that is
// not known).
func (p *Preparer) burstWindow() time.Duration {
	if p.ready <= 0 {
		return 0
	}
	return time.Duration(paceMargin*float64(p.ready)) + paceSlack
}

// addRecent adds an append of tokens (scaled) made at now to e's recent
// ones, and its burst: the most appended within burstWindow. An agent
// idle for minutes and then writing a dozen messages in a second reaches
// its limit sooner than its rate says (the replay's bursts at 8k: six of
// twenty requests waited about 2 s for a preparation that the burst
// itself had started). Called with p.mu held.
func (p *Preparer) addRecent(e *estimate, now time.Time, tokens int) {
	w := p.burstWindow()
	if w <= 0 {
		return
	}
	e.recent, e.recentSum = append(e.recent, stamp{at: now, tokens: tokens}), e.recentSum+tokens
	for len(e.recent) > maxRecent || now.Sub(e.recent[0].at) > w {
		e.recentSum -= e.recent[0].tokens
		e.recent = e.recent[1:]
	}
	e.burst = max(e.burst, e.recentSum)
}

// pace says why a session past prepare_at must be prepared now (a
// Cause), or "" when it may wait: a preparation's time to ready is
// known, the session's rate is (rateOf), and at that rate its limit is
// further off than paceMargin times that time plus paceSlack, further
// than two of its biggest appends, and further than its burst — were its
// context more tokens than the estimate says. Called with p.mu held.
func (p *Preparer) pace(e *estimate, now time.Time, more int) string {
	rate := rateOf(e, now)
	if p.ready <= 0 || rate <= 0 {
		return CauseUnpaced
	}
	room := e.limit - e.tokens - more
	if room <= 2*e.biggest {
		return CauseAppends
	}
	if room <= e.burst {
		return CauseBurst
	}
	left := time.Duration(float64(room) / rate * float64(time.Second))
	if left <= time.Duration(paceMargin*float64(p.ready))+paceSlack {
		return CausePace
	}
	return ""
}

// An estimate errs by a share of what it added since its count was read:
// the bytes of an append say its tokens only as well as the session's
// scale holds for it. At 8,000 tokens, LoCoMo's chats were 0-1.4 % off
// after 2,000 to 7,000 tokens appended, agent runs 8-13 % after 1,000 to
// 2,000: one chat, at 88 tokens over its estimate, reached its limit a
// second after its preparation began, and its request waited for it (a
// second of the 50 ms its goal allows). Where that share could make the
// session due, it is read (CauseNear): the pace then goes by its count.
const (
	uncertainShare = 0.15
	// minUncertain is the least error, as a share of the limit, worth a
	// read: under it the pace's own margin holds.
	minUncertain = 0.005
)

// uncertainty is how many tokens e may be under the session's count: 0
// when under minUncertain of the limit. Called with p.mu held.
func (p *Preparer) uncertainty(e *estimate) int {
	u := int(uncertainShare * float64(p.scaled(e, e.added)))
	if float64(u) < minUncertain*float64(e.limit) {
		return 0
	}
	return u
}

// rateWindow is how long a session's growth since its last read must
// be measured over before it alone sets the session's rate.
const rateWindow = 10 * time.Second

// rateOf is the session's growth in tokens a second: since its count was
// read, with the rate it had before that read making up what is shorter
// than rateWindow; 0 when neither is measured (under paceWindow, and no
// rate before). A read, every few appends near the limit, used to leave
// the pace unmeasured for a second, and an append then was prepared at
// once; an append or two over a few seconds read as the rate made it
// jumpy.
func rateOf(e *estimate, now time.Time) float64 {
	elapsed, grown := now.Sub(e.read).Seconds(), float64(e.tokens-e.base)
	if grown < 0 {
		grown = 0
	}
	if e.rate > 0 {
		prior := max(rateWindow.Seconds()-elapsed, 0)
		return (grown + e.rate*prior) / (elapsed + prior)
	}
	if elapsed < paceWindow.Seconds() || grown <= 0 {
		return 0
	}
	return grown / elapsed
}

// describe says what the estimate e knows at now, for a preparation's
// cause. Called with p.mu held.
func (p *Preparer) describe(e *estimate, now time.Time) string {
	return fmt.Sprintf("about %d of %d tokens, %d appended in %.1f s (%.0f a second), biggest append %d, ready in %.1f s", e.tokens, e.limit,
		e.tokens-e.base, now.Sub(e.read).Seconds(), rateOf(e, now), e.biggest, p.ready.Seconds())
}

// NearBudget is told of a runtime's ContextNearBudget: the session is
// prepared whatever the estimate says. It never blocks.
func (p *Preparer) NearBudget(ctx context.Context, req pipeline.Request) {
	p.triggers.Add(1)
	p.enqueue(job{tenant: tenant.From(ctx), sessionID: req.SessionID, trigger: pipeline.PrepareNearBudget, requestID: req.ID, model: req.Model, limit: req.ContextLimit,
		at: p.opt.Now(), cause: CauseNearBudget})
}

// Compacted is told that a session was compacted here: its estimate is
// gone (the context shrank: the next append reads it), all but its scale.
func (p *Preparer) Compacted(ctx context.Context, sessionID string) {
	key := tenant.Key(tenant.From(ctx), sessionID)
	p.mu.Lock()
	if e := p.est[key]; e != nil {
		p.est[key] = e.kept(p.opt.Now())
	}
	p.mu.Unlock()
}

func (p *Preparer) enqueue(j job) {
	p.mu.Lock()
	switch {
	case p.running[j.key()]:
		// After the running one (a runtime's word wins over an append's).
		if prev, ok := p.again[j.key()]; !ok || prev.trigger != pipeline.PrepareNearBudget || j.trigger == pipeline.PrepareNearBudget {
			p.again[j.key()] = j
		}
		p.mu.Unlock()
		return
	case p.pending[j.key()]:
		if j.trigger == pipeline.PrepareNearBudget {
			// A runtime's word wins over an append's.
			for i := range p.queue {
				if p.queue[i].key() == j.key() {
					p.queue[i] = j
				}
			}
		}
		p.mu.Unlock()
		return
	case len(p.queue) >= p.opt.Queue:
		p.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	p.pending[j.key()] = true
	p.queue = append(p.queue, j)
	p.mu.Unlock()
	p.queued.Add(1)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// next takes the waiting job whose session is due first (dueAt), the
// oldest among equals. With every worker on a model call, a FIFO queue
// kept a session seconds from its limit behind sessions that had just
// passed prepare_at: in the replay with big observations at five times
// the pace, a tau-bench preparation queued 1.9 s, and its request waited
// 333 ms for it.
func (p *Preparer) next() (job, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now, pick := p.opt.Now(), -1
	var first time.Time
	for i, j := range p.queue {
		if p.running[j.key()] {
			continue // one preparation of a session at a time
		}
		if due := p.dueAt(j, now); pick < 0 || due.Before(first) {
			pick, first = i, due
		}
	}
	if pick < 0 {
		return job{}, false
	}
	j := p.queue[pick]
	p.queue = slices.Delete(p.queue, pick, pick+1)
	delete(p.pending, j.key())
	p.running[j.key()] = true
	return j, true
}

// dueAt is when job j's session is expected to reach its limit: a read
// first (it takes milliseconds, and the pace decides on it), then by the
// room its estimate leaves at its rate; a job with neither (a session
// not read yet, a runtime's hint) as due when it was queued. Called with
// p.mu held.
func (p *Preparer) dueAt(j job, now time.Time) time.Time {
	if j.measure {
		return time.Time{}
	}
	e := p.est[j.key()]
	if j.trigger == pipeline.PrepareNearBudget || e == nil || e.limit == 0 {
		return j.at
	}
	rate := rateOf(e, now)
	if rate <= 0 {
		return j.at
	}
	return now.Add(time.Duration(float64(max(e.limit-e.tokens, 0)) / rate * float64(time.Second)))
}

// done ends a session's preparation (its key), queueing the trigger that came for
// it meanwhile.
func (p *Preparer) done(key string) {
	p.mu.Lock()
	delete(p.running, key)
	j, ok := p.again[key]
	delete(p.again, key)
	p.mu.Unlock()
	if ok {
		p.enqueue(j)
	}
}

// Run runs the workers until ctx ends; preparations running then are
// cancelled (a preparation is only ever a head start).
func (p *Preparer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range p.opt.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.work(ctx)
		}()
	}
	wg.Wait()
	return nil
}

func (p *Preparer) work(ctx context.Context) {
	for {
		j, ok := p.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
				continue
			case <-time.After(time.Second):
				continue
			}
		}
		// Requests first: wait while they use the service's capacity.
		for p.opt.Busy != nil && p.opt.Busy() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		snap, peak := p.snapshot(j.key())
		started := p.opt.Now()
		// Planned to fit past the limit by the session's biggest append:
		// the request comes once an append takes the context over it.
		out, err := p.svc.Prepare(tenant.With(ctx, j.tenant), pipeline.PrepareRequest{SessionID: j.sessionID, Trigger: j.trigger, RequestID: j.requestID,
			Model: j.model, ContextLimit: j.limit, Measure: j.measure, Overshoot: peak})
		out.Cause, out.CauseDetail = j.cause, j.detail
		if !j.at.IsZero() {
			out.QueuedMS = started.Sub(j.at).Milliseconds()
		}
		p.learn(j.key(), out, snap)
		if err == nil && out.Outcome == pipeline.PrepareDone && !j.at.IsZero() {
			p.readyIn(p.opt.Now().Sub(j.at))
		}
		p.done(j.key())
		if j.measure && err == nil {
			p.dueOnCount(j)
		}
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled): // (a request cancelled it: it took its own path)
			p.log.Warn("preparation failed", slog.String("tenant", j.tenant), slog.String("session_id", j.sessionID), slog.String("outcome", string(out.Outcome)), slog.String("error", err.Error()))
		case err == nil && (out.Outcome == pipeline.PrepareDone || out.Outcome == pipeline.PrepareFailed):
			p.log.Info("preparation", slog.String("tenant", j.tenant), slog.String("session_id", j.sessionID), slog.String("trigger", j.trigger),
				slog.String("cause", j.cause), slog.String("estimate", j.detail), slog.Int64("queued_ms", out.QueuedMS), slog.String("outcome", string(out.Outcome)), slog.String("detail", out.Detail), slog.Int("llm_calls", out.LLMCalls), slog.Int64("duration_ms", out.DurationMS))
		}
		if p.opt.Observe != nil && ctx.Err() == nil {
			p.opt.Observe(out, err)
		}
	}
}

// dueOnCount queues a preparation of the session a measure job read
// when its count says the pace is due (its rate known): the next append
// may be the one that takes it over its limit.
func (p *Preparer) dueOnCount(j job) {
	p.mu.Lock()
	e, now := p.est[j.key()], p.opt.Now()
	due := ""
	if e != nil && e.limit > 0 && e.tokens <= e.limit && float64(e.tokens) >= p.svc.Config().PrepareAt*float64(e.limit) && p.pacing() && rateOf(e, now) > 0 {
		due = p.pace(e, now, 0)
	}
	detail := ""
	if due != "" {
		detail = p.describe(e, now)
	}
	p.mu.Unlock()
	if due != "" {
		p.enqueue(job{tenant: j.tenant, sessionID: j.sessionID, trigger: pipeline.PrepareAppend, at: now, cause: due, detail: detail})
	}
}

// Calibration (see calibrate).
const (
	// minCalibration is the fewest estimated tokens appended between two
	// reads that measure a session's scale (under it, a message's framing
	// and a count's rounding weigh too much).
	minCalibration = 200
	// minScale and maxScale bound a scale: English is about 0.7 of the
	// estimate, code about 0.9, text in scripts of three-byte characters
	// up to about 2; images' base64 is far under.
	minScale, maxScale = 0.1, 3
)

// calibrate learns a session's scale from a read that found grown tokens
// appended since the last one, whose appends the estimate put at added
// (unscaled), and returns it. EstimateTokens errs high (a third of the
// bytes, where English is about a quarter): uncalibrated, a chat's limit
// seemed near while a tenth of it or more was free, and its preparation,
// paced on that, came that much early (LoCoMo's chats at 8k: ready 11 to
// 31 s before their request, which then left a raw tail of up to 1,800
// tokens more than a compaction made at the limit). A session's first
// measure is its scale, later ones move it halfway; the preparer's scale
// moves a quarter towards each, for the sessions still unmeasured.
// Called with p.mu held.
func (p *Preparer) calibrate(e *estimate, grown, added int) float64 {
	if added < minCalibration || grown <= 0 {
		return e.scale
	}
	m := min(max(float64(grown)/float64(added), minScale), maxScale)
	if p.scale == 0 {
		p.scale = m
	} else {
		p.scale = (3*p.scale + m) / 4
	}
	if e.scale == 0 {
		return m
	}
	return (e.scale + m) / 2
}

// scaled is tokens as the estimate e counts them: by its session's scale,
// or the preparer's where none is measured yet, or as estimated. Called
// with p.mu held.
func (p *Preparer) scaled(e *estimate, tokens int) int {
	s := e.scale
	if s == 0 {
		s = p.scale
	}
	if s == 0 {
		return tokens
	}
	return int(math.Ceil(s * float64(tokens)))
}

// snapshot is the session's (its key's) estimate as a preparation begins:
// learn calibrates that estimate only, not one made since.
func (p *Preparer) snapshot(key string) (*estimate, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.est[key]
	if e == nil {
		return nil, 0
	}
	return e, e.peak
}

// What a preparation takes to be ready (see readyIn).
const (
	readyWindow   = 20
	readyQuantile = 0.9
)

// readyIn learns that a preparation was ready d after its trigger. The
// pacing goes by the slow ones, the 90th percentile of the last 20: a
// session's preparation may take two model calls where most take one
// (LoCoMo's second compactions at 8k: 4.1 s against 2.1 s), and with the
// moving average it paced on, those came after their request, which
// then waited for them (up to 1.1 s).
func (p *Preparer) readyIn(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.readies) == readyWindow {
		p.readies = slices.Delete(p.readies, 0, 1)
	}
	p.readies = append(p.readies, d)
	sorted := slices.Sorted(slices.Values(p.readies))
	p.ready = sorted[int(math.Ceil(readyQuantile*float64(len(sorted))))-1]
}

// learn updates the session's (its key's) estimate from what a
// preparation read, snap being the estimate as it began.
func (p *Preparer) learn(sid string, out pipeline.Preparation, snap *estimate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.est[sid]
	if out.HeadSeq == 0 || out.Limit == 0 {
		if old != nil { // not read: the next append reads it
			p.est[sid] = old.kept(p.opt.Now())
		}
		return
	}
	e := &estimate{}
	// at is what the appends the estimate saw added up to the head the
	// read found, when it saw that head: the appends the runtime made
	// while the session was read are on top of the count. (Measured
	// only when the read found the head the preparation began at, a
	// runtime appending as fast as the reads went was never measured:
	// read again every few appends, a read per append.)
	at, seen := 0, false
	now := p.opt.Now()
	if old != nil {
		e = old.kept(now)
		if old == snap {
			// (An estimate without a count has none to calibrate on.)
			if at, seen = old.addedAt(out.HeadSeq); seen && old.limit > 0 {
				e.scale = p.calibrate(old, out.TokensBefore-old.base, at)
			}
		}
	}
	e.head, e.readHead, e.tokens, e.base, e.limit, e.read, e.bytes = out.HeadSeq, out.HeadSeq, out.TokensBefore, out.TokensBefore, out.Limit, now, out.SessionBytes
	if seen && old.head > out.HeadSeq {
		// The appends after the read's head stay on the estimate.
		e.head, e.added, e.biggest, e.bytes = old.head, old.added-at, old.biggest, old.bytes
		for _, m := range old.marks {
			if m.head > out.HeadSeq {
				e.marks = append(e.marks, mark{head: m.head, added: m.added - at})
			}
		}
		e.tokens = e.base + p.scaled(e, e.added)
	}
	switch out.Outcome {
	case pipeline.PrepareDone, pipeline.PrepareUnchanged, pipeline.PrepareNoModel, pipeline.PrepareNothing, pipeline.PrepareInFlight,
		pipeline.PrepareFailed, pipeline.PrepareCancelled:
		// A preparation stands, none can be made, or one failed (the
		// model may be down: not again at every append).
		e.settled = now
	}
	p.remember(sid, e)
}

// remember sets the estimate of the session key, forgetting one at random
// when the preparer holds maxEstimates. Called with p.mu held.
func (p *Preparer) remember(key string, e *estimate) {
	if _, ok := p.est[key]; !ok && len(p.est) >= maxEstimates {
		for k := range p.est {
			delete(p.est, k)
			break
		}
	}
	p.est[key] = e
}
