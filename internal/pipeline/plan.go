package pipeline

// The plan of a compaction: the session as one attempt reads it, whether
// it needs compacting, where the raw tail starts, and the ladder's
// deterministic part (clear tool results, else a summary's budget), all
// without a model call. A preparation plans the same way, as if the
// context had grown to its limit.

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// plan is the session as one attempt found it.
type plan struct {
	sess    *session.Session
	counter *tokens.Counter
	model   string
	limit   int
	// reread: the summariser rereads (Rereader) and sess.Summarised holds
	// what the summary in force covers, so the summary is written anew.
	reread bool
	pinned []session.Message
	// pinnedTokens counts the pinned messages and the reply priming.
	pinnedTokens int
	// candidates are the raw messages after the summary, as the context
	// shows them (cleared ones as placeholders), counted.
	candidates []session.Message
	// before is the context now, and beforeTokens its count.
	before       []session.Message
	beforeTokens int
	// growth is how much the context is expected to grow before the
	// compaction is committed: a preparation plans as if the context had
	// already reached its limit (0 for a request).
	growth int
	// cold is set when the request says the runtime's prompt cache has
	// lapsed: clearing then takes every old tool result it may.
	cold bool
	// prepared, when set, gets the session's preparation as read beside
	// the load (a request's plan only).
	prepared <-chan preparedRead
}

// overflow decides whether the context needs compacting; when it does
// not, res says so (noop, or nothing to compact).
func (s *Service) overflow(p *plan, req Request, res *Result) Decision {
	d := Overflow(OverflowInput{Trigger: req.Trigger, Tokens: p.beforeTokens, Limit: p.limit, Messages: len(p.before),
		MaxMessages: s.cfg.MaxMessages, Empty: len(p.candidates) == 0 && p.sess.Summary == nil})
	res.Decision = d.Reason
	switch {
	case d.Reason == DecisionEmpty:
		res.Outcome = OutcomeNothingToCompact
	case !d.Needed:
		res.Outcome = OutcomeNoop
	}
	return d
}

// selectTail decides where the raw tail starts: the last turns, within
// the headroom the pinned messages and a full summary leave (Select).
func (s *Service) selectTail(p *plan) Selection {
	reserve := s.summaryReserve(p) + summaryFraming
	tailBudget := int(s.cfg.HeadroomRatio*float64(p.limit)) - p.pinnedTokens - reserve
	if tailBudget < p.limit/10 {
		// The pinned messages and the summary leave no headroom: keep half
		// of the room they leave as tail, so that the compaction still cuts
		// enough and the next one is not due at once.
		tailBudget = max((p.limit-p.pinnedTokens-reserve)/2, p.limit/10)
	}
	// A preparation leaves the room to the messages still to come, and
	// the turns they will bring.
	tailBudget = max(tailBudget-p.growth, 0)
	// Enough summarised that a summary replaces it with fewer tokens
	// (with the summary in force, which it replaces too).
	minSummarised := minSummaryTokens + summaryFraming + 1
	if hasSummary(p.sess.Summary) {
		minSummarised -= p.sess.Summary.Tokens
	}
	return Select(SelectInput{Candidates: p.candidates, KeepRecentTurns: s.keepTurns(p), TailBudget: tailBudget, MaxTailMessages: s.maxTail(p),
		MinSummarised: minSummarised})
}

// keepTurns is how many of the latest turns the selection keeps raw:
// keep_recent_turns, less, for a preparation, the turns the growth to come
// is expected to bring at the session's tokens per turn (at least one).
// Committed at the limit, a preparation's raw tail is what it kept plus
// every message since; kept whole, the compaction left the runtime with
// more raw turns than one made at the limit, and the next compaction came
// sooner (a text-action agent at 32k: 18,000 tokens left against 7,000).
func (s *Service) keepTurns(p *plan) int {
	k := s.cfg.KeepRecentTurns
	if p.growth == 0 || k <= 1 {
		return k
	}
	turns, tokens := 0, 0
	for i := range p.candidates {
		tokens += p.candidates[i].Tokens
		if p.candidates[i].Role == session.RoleUser {
			turns++
		}
	}
	if turns < 2*k || tokens == 0 {
		return k // too few turns to know their size
	}
	expected := p.growth * turns / tokens
	return max(1, k-expected)
}

// grownCount is how many messages the context holds when the compaction
// is committed: those now, and for a preparation those its growth will
// bring, at the session's tokens per message. A preparation that counted
// only those now chose a clearing at prepare_at that the request, past
// max_messages by then, could not stand on: it summarised, the model's
// time on the turn (the gateway's agent replay: 2 of 8 compactions).
func grownCount(p *plan) int {
	n := len(p.before)
	if p.growth == 0 || len(p.candidates) == 0 {
		return n
	}
	tokens := 0
	for i := range p.candidates {
		tokens += p.candidates[i].Tokens
	}
	if tokens == 0 {
		return n
	}
	return n + p.growth*len(p.candidates)/tokens
}

// target is what the context aims for after a compaction: the headroom
// share of the limit, less the growth a preparation leaves room for.
func (s *Service) target(p *plan) int {
	return int(s.cfg.HeadroomRatio*float64(p.limit)) - p.growth
}

// summaryReserve is the summary's share of the target: max_summary_tokens
// where the window is large, else half of what the target leaves beside
// the pinned messages (the other half is the raw tail), so that summary
// plus tail meet the target at every window where the pinned messages
// leave room for both; never under the smallest useful summary.
//
// A preparation (planned as if the context had grown to its limit) keeps
// max_summary_tokens: with the growth taken off the target its summary
// came out shorter, cutting less, and preparations were redone as the
// session grew (make bench's prepared replay spent 29 times the tokens on
// preparations never used). Preparations are redesigned in issue 26.
func (s *Service) summaryReserve(p *plan) int {
	if p.growth > 0 {
		return s.maxSummary()
	}
	return max(minSummaryTokens, min(s.maxSummary(), (s.target(p)-p.pinnedTokens-2*summaryFraming)*2/3))
}

// maxSummary is what a summary may hold at most whatever its message's
// seqs: max_summary_tokens less the widest framing (a plan knows its own
// framing, framingOf, and gives the summary what that leaves).
func (s *Service) maxSummary() int { return s.cfg.MaxSummaryTokens - summaryFraming }

// ledgerBudget is what the artifact ledger may take of a summary's budget:
// its share of max_summary_tokens, so that a summary shortened to fit a
// small window keeps the files, commands and errors it would have kept
// and shortens its prose first; never over maxLedgerShare of the budget.
func (s *Service) ledgerBudget(budget int) int {
	return max(0, min(int(s.cfg.LedgerShare*float64(s.cfg.MaxSummaryTokens)), int(max(s.cfg.LedgerShare, maxLedgerShare)*float64(budget)),
		budget-minSummariserTokens))
}

// stateBudget is what the working state may take beside the ledger's
// budget (and what the rest of the ledger leaves of it), out of the
// summariser's prose: an eighth of the budget, at most 200 tokens, so
// that at a small window it does not crowd out the commands, files and
// identifiers the ledger lists.
func (s *Service) stateBudget(budget int) int {
	return max(0, min(budget/8, 200, budget-minSummariserTokens-s.ledgerBudget(budget)))
}

// roomyBudget is the summary budget from which the working state has a
// share of its own beside the ledger's (below it, a summariser left with
// little more than minSummariserTokens wrote nothing: the property test's
// 200-token summaries).
const roomyBudget = 4 * minSummaryTokens

// minSummariserTokens is what the summariser keeps beside the ledger: the
// template's headings (about 40 tokens) and a bullet or two. Below it a
// summary has no room for anything and fails as empty (at two thirds of
// it, tau-bench's sessions at 4k failed once the working state filled the
// ledger's share).
const minSummariserTokens = minSummaryTokens

// maxLedgerShare bounds the ledger's share of a shortened summary: the
// summariser keeps room for the goal, the decisions and the open tasks.
const maxLedgerShare = 0.7

// maxTail is the most messages the raw tail may hold (0: no bound).
func (s *Service) maxTail(p *plan) int {
	if s.cfg.MaxMessages <= 0 {
		return 0
	}
	return max(s.cfg.MaxMessages-len(p.pinned)-1, 1)
}

// reduction is what the ladder decided for one compaction.
type reduction struct {
	// step is the last step taken: StepClear (no model call) or
	// StepSummarise.
	step string
	// clear is what clearing cleared, and cleared every message the
	// context shows cleared after the compaction.
	clear   ClearPlan
	cleared []session.Cleared
	// selected are summarised (as the context showed them, so cleared
	// results are read as their placeholders); tail stays raw.
	selected, tail []session.Message
	// budget is the summary's: the smaller of max_summary_tokens, what the
	// window leaves, and what the summary replaces.
	budget int
	// summary is the summary in force after the compaction ("" when none)
	// and summaryTokens its count; incremental, strategy and the usage
	// figures describe how it was made.
	summary       string
	summaryTokens int
	incremental   bool
	// A top-up of a prepared compaction (prepared) summarises on the
	// plan with it applied (on), and covers what it summarised (covered)
	// too; preparedAge is how long it had been ready.
	on          *plan
	covered     []session.Message
	prepared    *session.PreparedCompaction
	preparedAge int64
	// written: the summary is the preparation's, with tool results
	// cleared after it (no model call).
	written bool
	// ledger is the artifact ledger of what the summary covers, rendered
	// into it as ledgerBullets; instructionsDropped counts the
	// summariser's instruction bullets the user never wrote.
	ledger        *ledger.Ledger
	ledgerBullets []string
	// state is the working state's bullets (of ledgerBullets), which
	// the summary must hold as they are (Verify).
	state               []string
	instructionsDropped int
}

// planOf is the plan the summary step reads: p, or for a top-up p with
// the prepared compaction applied.
func (r *reduction) planOf(p *plan) *plan {
	if r.on != nil {
		return r.on
	}
	return p
}

// key is the compaction's idempotency key: the last message it summarises
// (or, when it only clears, the last it clears) and the head.
func (r *reduction) key(sessionID string, head int64) string {
	if r.step == StepClear {
		return IdempotencyKey(sessionID, "cleared:"+r.clear.Cleared[len(r.clear.Cleared)-1].ID, head)
	}
	return IdempotencyKey(sessionID, r.selected[len(r.selected)-1].ID, head)
}

// plan runs the ladder's deterministic part (no model call): each step of
// cfg.Reductions in order, while the context is over its target (the
// headroom share of the limit). Clearing needs no model: it replaces old
// tool results outside its raw tail (the last turns, within half the room
// the target leaves) and the last keep_tool_results results. A summary, on
// what clearing left, gets the budget that keeps the context within its
// limit and smaller than it was. When no summary can fit, a clearing that
// brought the context within its limit stands. With nothing to do, res
// is answered (already compacted) and plan returns nil.
func (s *Service) plan(p *plan, d Decision, sel Selection, res *Result) (*reduction, error) {
	target := s.target(p)
	r := &reduction{cleared: carried(clearedOf(p.sess.Summary), p.candidates)}
	cands, now, growthCleared := s.planClear(p, d, r, target)
	// A clearing stands when it fits the limit and leaves no other reason
	// to compact (the message count).
	fitsCount := s.cfg.MaxMessages <= 0 || grownCount(p) <= s.cfg.MaxMessages
	cleared := len(r.clear.Cleared) > 0 && now <= p.limit && fitsCount
	asCleared := func() *reduction {
		r.step, r.tail = StepClear, cands
		r.cleared = append(r.cleared, r.clear.Cleared...)
		if hasSummary(p.sess.Summary) {
			r.summary, r.summaryTokens = SummaryText(p.sess.Summary), summaryTokens(p.counter, p.sess.Summary)
		}
		return r
	}
	// Clearing aims at the summary's target, and stands when it gets
	// halfway from the limit to it: no model call, and the context before
	// the first cleared message stays as it was. A preparation judges it
	// at the limit: the context grown by the growth, less what clearing
	// will take of that.
	if cleared && (now+p.growth-growthCleared <= (target+p.growth+p.limit)/2 || !s.cfg.has(StepSummarise) || sel.Cut == 0) {
		return asCleared(), nil
	}
	if sel.Cut == 0 {
		return nil, s.nothingToCut(p, d, now, res)
	}
	if !s.cfg.has(StepSummarise) {
		return nil, fail(ReasonConfiguration, false, ErrConfiguration,
			"clearing tool results leaves about %d tokens, over the limit %d, and the ladder (reductions) has no summary step", now, p.limit)
	}
	r.selected, r.tail = cands[:sel.Cut], cands[sel.Cut:]
	replaced, tailTokens := 0, 0
	if hasSummary(p.sess.Summary) {
		replaced = p.sess.Summary.Tokens
	}
	for i := range r.selected {
		replaced += r.selected[i].Tokens
	}
	for i := range r.tail {
		tailTokens += r.tail[i].Tokens
	}
	// The summary gets what the target leaves beside the pinned messages
	// and the tail (so the context lands on the target, not near the
	// limit); only when the tail alone is past the target, what the limit
	// leaves.
	// The compaction message, its framing and summary, is within
	// max_summary_tokens.
	frame := framingOf(p.counter, r.selected[len(r.selected)-1].Seq)
	room := p.limit - p.growth - p.pinnedTokens - frame - tailTokens
	if aim := target - p.pinnedTokens - frame - tailTokens; aim >= minSummaryTokens && p.growth == 0 {
		room = aim // (a preparation: see summaryReserve)
	}
	r.budget = min(s.cfg.MaxSummaryTokens-frame, room, replaced-frame-1)
	if r.budget < minSummaryTokens {
		if cleared {
			return asCleared(), nil
		}
		if free := p.limit - p.growth - p.pinnedTokens - summaryFraming; free < minSummaryTokens {
			return nil, fail(ReasonConfiguration, false, ErrConfiguration,
				"the pinned messages (%d tokens) leave %d tokens of the %d-token context limit, under the %d a summary needs: raise the session's context_limit or pin less",
				p.pinnedTokens, max(free, 0), p.limit, minSummaryTokens)
		}
		return nil, fail(ReasonInsufficientProgress, false, ErrInsufficientProgress,
			"no summary can help: the window leaves %d tokens for it (pinned %d, tail %d, limit %d) and it would replace %d, under the %d a summary needs",
			room, p.pinnedTokens, tailTokens, p.limit, replaced-summaryFraming, minSummaryTokens)
	}
	r.step = StepSummarise
	r.cleared = carried(append(r.cleared, r.clear.Cleared...), r.tail)
	return r, nil
}

// planClear plans the clearing step into r (nothing when the ladder has
// none, or the reason is the message count, which clearing cannot fix):
// the candidates with their results cleared, the context's tokens after
// it, and what the request will clear of a preparation's growth.
func (s *Service) planClear(p *plan, d Decision, r *reduction, target int) (cands []session.Message, now, growthCleared int) {
	cands, now = p.candidates, p.beforeTokens
	if !s.cfg.has(StepClear) || d.Reason == DecisionMessages {
		return cands, now, 0
	}
	already := make(map[int64]bool, len(r.cleared))
	for _, c := range r.cleared {
		already[c.Seq] = true
	}
	summaryNow := 0
	if hasSummary(p.sess.Summary) {
		summaryNow = p.sess.Summary.Tokens
	}
	// A preparation clears as the request will, at the limit: the
	// growth to come fills the tail first, so the messages now are
	// its tail only past the growth.
	tailBudget := max((target+p.growth-p.pinnedTokens-summaryNow)/2, p.limit/10)
	tail := Select(SelectInput{Candidates: cands, KeepRecentTurns: s.cfg.KeepRecentTurns, TailBudget: max(tailBudget-p.growth, 0)})
	// With the runtime's cache lapsed, the next call writes the whole
	// context anyway: clear every old result now (as a runtime's
	// time-based clearing does) rather than in later batches that
	// would each cost a warm cache's prefix.
	need := now - target
	if p.cold {
		need = now
	}
	r.clear = PlanClear(ClearInput{Messages: cands, Tail: tail.Cut, Already: already, KeepToolResults: s.cfg.KeepToolResults,
		MinTokens: s.cfg.ClearMinTokens, ExcludeTools: s.cfg.ExcludeTools, Inputs: s.cfg.ClearToolInputs,
		Need: need, AtLeast: max(s.cfg.ClearAtLeast, int(math.Ceil(s.cfg.MinReduction*float64(now+p.growth)))),
		Count: p.counter.Message, Encoding: p.counter.Encoding()})
	if len(r.clear.Cleared) > 0 {
		cands = applyCleared(cands, r.clear.Cleared, p.counter.Encoding())
		for i := range cands {
			p.counter.Ensure(&cands[i])
		}
		now -= r.clear.Saved
	}
	if fit := s.fitPending(p, cands, already, target); len(fit.Cleared) > 0 {
		cands = applyCleared(cands, fit.Cleared, p.counter.Encoding())
		for i := range cands {
			p.counter.Ensure(&cands[i])
		}
		now -= fit.Saved
		r.clear.Cleared, r.clear.Saved = append(r.clear.Cleared, fit.Cleared...), r.clear.Saved+fit.Saved
	}
	// What the request will clear of the growth itself: the part past
	// its tail, in the share of clearable results the session shows.
	if p.growth > 0 {
		growthCleared = int(clearableShare(cands, s.cfg) * float64(max(p.growth-tailBudget, 0)))
	}
	return cands, now, growthCleared
}

// nothingToCut answers a plan with no legal cut: the compaction in force
// stands (res says so, nil) when the context fits or the reason is not its
// tokens; otherwise nothing more can be summarised or cleared.
func (s *Service) nothingToCut(p *plan, d Decision, now int, res *Result) error {
	if p.sess.Summary != nil && (now <= p.limit || d.Reason != DecisionTokens) {
		res.Outcome, res.Strategy = OutcomeAlreadyCompacted, StrategyExisting
		return nil
	}
	if p.sess.Summary != nil {
		return fail(ReasonInsufficientProgress, false, ErrInsufficientProgress,
			"the context (%d tokens) is over its limit %d and nothing more can be summarised or cleared: the summary in force, the pinned messages (%d tokens) and a step waiting for its results are all it holds",
			now, p.limit, p.pinnedTokens)
	}
	return fail(ReasonInsufficientProgress, false, ErrInsufficientProgress,
		"no message can be summarised or cleared: the session's %d messages hold no legal cut before the last %d turns", len(p.candidates), s.cfg.KeepRecentTurns)
}

// fitPending plans the clearing of a step still waiting for results (the
// session's last assistant message with a call not answered yet, and the
// results come so far: Pending), which no cut may separate and so stays
// raw whatever is summarised. When that step alone takes more than half
// of what the target leaves beside the pinned messages, its results are
// cleared (oldest first, keep_tool_results notwithstanding: they are the
// latest) until it fits: otherwise no compaction could bring the context
// under its limit (a 2,000-token result at a 1,500-token window).
func (s *Service) fitPending(p *plan, cands []session.Message, already map[int64]bool, target int) ClearPlan {
	pend := Pending(cands)
	if pend == len(cands) {
		return ClearPlan{}
	}
	tokens := 0
	for i := pend; i < len(cands); i++ {
		tokens += cands[i].Tokens
	}
	room := max((target-p.pinnedTokens-summaryFraming)/2, p.limit/10)
	if tokens <= room {
		return ClearPlan{}
	}
	block := cands[pend:]
	return PlanClear(ClearInput{Messages: block, Tail: len(block), Already: already, MinTokens: s.cfg.ClearMinTokens,
		ExcludeTools: s.cfg.ExcludeTools, Inputs: true, Need: tokens - room, Count: p.counter.Message, Encoding: p.counter.Encoding()})
}

// clearableShare is the share of msgs' tokens (their newer half) in tool
// results clearing may take: at least clear_min_tokens, of a tool it does
// not exclude. A preparation expects the growth to come to be as
// clearable.
func clearableShare(msgs []session.Message, cfg Config) float64 {
	names := toolNames(msgs)
	total, clearable := 0, 0
	for i := len(msgs) / 2; i < len(msgs); i++ {
		m := &msgs[i]
		total += m.Tokens
		if m.Role == session.RoleTool && m.Tokens >= cfg.ClearMinTokens && !slices.Contains(cfg.ExcludeTools, firstNonEmpty(names[m.ID], m.Name)) {
			clearable += m.Tokens
		}
	}
	if total == 0 {
		return 0
	}
	return float64(clearable) / float64(total)
}

// carried keeps the cleared entries of messages still in msgs (a
// summarised message is no longer shown, cleared or not).
func carried(cleared []session.Cleared, msgs []session.Message) []session.Cleared {
	if len(cleared) == 0 {
		return nil
	}
	in := make(map[int64]string, len(msgs))
	for i := range msgs {
		in[msgs[i].Seq] = msgs[i].ID
	}
	var out []session.Cleared
	for _, c := range cleared {
		if id, ok := in[c.Seq]; ok && id == c.ID {
			out = append(out, c)
		}
	}
	return out
}

// load reads the session and works out its model, limit, counter, pinned
// messages and candidates.
func (s *Service) load(ctx context.Context, req Request) (*plan, error) {
	sess, err := s.store.Load(ctx, req.SessionID, !s.cfg.EnableIncremental)
	reread := false
	if err == nil && s.cfg.EnableIncremental && hasSummary(sess.Summary) && s.rereads(ctx, req, firstNonEmpty(req.Model, sess.Record.Model)) &&
		sess.Record.TailStartSeq-1-int64(len(sess.Record.PinnedSeqs)) <= maxReread {
		// Rereading costs no model: read what the summary covers too.
		reread = true
		sess, err = s.store.Load(ctx, req.SessionID, true)
	}
	if errors.Is(err, session.ErrNotFound) {
		return nil, fail(ReasonSessionNotFound, false, ErrSessionNotFound, "no session %q", req.SessionID)
	}
	if err != nil {
		return nil, storeError(err, "load session "+req.SessionID)
	}
	model := firstNonEmpty(req.Model, sess.Record.Model)
	info := s.table.Lookup(model)
	counter, err := tokens.ForEncoding(info.Encoding)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidRequest, Err: err}
	}
	counter = counter.WithImageEstimate(s.cfg.ImageTokens)
	// Count first (once per message: stored counts are reused), then build
	// the views, which copy the messages.
	for i := range sess.Messages {
		counter.Ensure(&sess.Messages[i])
	}
	if sess.Summary != nil {
		counter.Ensure(sess.Summary)
	}
	p := &plan{sess: sess, counter: counter, model: model, reread: reread,
		limit: firstPositive(req.ContextLimit, sess.Record.ContextLimit, info.ContextWindow)}
	p.pinned, p.candidates = splitPinned(sess, s.cfg.KeepFirstUserMessage)
	p.candidates = applyCleared(p.candidates, clearedOf(sess.Summary), counter.Encoding())
	for i := range p.candidates {
		counter.Ensure(&p.candidates[i])
	}
	p.pinnedTokens = tokens.ReplyPriming()
	for i := range p.pinned {
		p.pinnedTokens += p.pinned[i].Tokens
	}
	// The context now (as ContextOf shows it), from the counted parts.
	p.before = make([]session.Message, 0, len(p.pinned)+1+len(p.candidates))
	p.before = append(p.before, p.pinned...)
	if hasSummary(sess.Summary) {
		p.before = append(p.before, *sess.Summary)
	}
	p.before = append(p.before, p.candidates...)
	p.beforeTokens = counter.Context(p.before)
	return p, nil
}

func withoutPinned(msgs, pinned []session.Message) []session.Message {
	set := make(map[string]bool, len(pinned))
	for i := range pinned {
		set[pinned[i].ID] = true
	}
	out := make([]session.Message, 0, len(msgs))
	for i := range msgs {
		if !set[msgs[i].ID] {
			out = append(out, msgs[i])
		}
	}
	return out
}
