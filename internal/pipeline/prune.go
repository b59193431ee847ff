package pipeline

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// compactionNamespace roots the deterministic ids of compaction messages.
var compactionNamespace = uuid.MustParse("6f0c55e4-3a57-4f7e-9d2b-8f4a3c1d2e10")

// IdempotencyKey is the design note's key (session_id,
// last_summarised_message_id, current_head_count). Two compactions with the
// same key summarise the same messages of the same session state.
func IdempotencyKey(sessionID, lastSummarisedID string, headCount int64) string {
	return fmt.Sprintf("%s:%s:%d", sessionID, lastSummarisedID, headCount)
}

// CompactionID derives the compaction message's id from its idempotency key
// (UUIDv5), so a retry or a racing replica writes under the same id and
// finds the other's work instead of adding a second compaction.
func CompactionID(key string) string {
	return uuid.NewSHA1(compactionNamespace, []byte(key)).String()
}

// summaryPreamble opens a compaction message's content, so the model reading
// the context knows what it is, and how to read back what it stands for
// (expand_history with from_seq and to_seq).
const summaryPreamble = "Summary of messages %d to %d (compacted; expand_history reads them back), before the raw messages:\n\n"

// SummaryText returns the summary inside a compaction message's content.
func SummaryText(m *session.Message) string {
	if m.Compaction != nil {
		return m.Compaction.SummaryText
	}
	if _, after, ok := strings.Cut(m.Content.Text, "\n\n"); ok {
		return after
	}
	return m.Content.Text
}

// summaryTokens is a compaction message's summary count: the one stored at
// its commit (counted then, in the session's encoding), else counted now.
func summaryTokens(c *tokens.Counter, m *session.Message) int {
	if m.Compaction != nil && m.Compaction.SummaryTokens > 0 {
		return m.Compaction.SummaryTokens
	}
	return c.Count(SummaryText(m))
}

// pruneInput is what the assemble step turns into a commit.
type pruneInput struct {
	sessionID string
	key       string
	requestID string
	// step is StepSummarise (selected were summarised into summary) or
	// StepClear (nothing summarised: the summary in force, if any, stays).
	step     string
	summary  string
	prev     *session.Message
	pinned   []session.Message
	selected []session.Message // summarised by this compaction
	// tail are the raw messages after it; cleared, the ones of them it
	// shows cleared.
	tail        []session.Message
	cleared     []session.Cleared
	headSeq     int64
	model       string
	incremental bool
	now         time.Time
	// ledger and ledgerBullets are the summary's artifact ledger (a
	// compaction that writes no summary carries the one in force).
	ledger              *ledger.Ledger
	ledgerBullets       []string
	instructionsDropped int
}

// summaryRange is what the summary of a compaction message covers.
func summaryRange(m *session.Message) (from, to int64) {
	if m == nil || m.Compaction == nil {
		return 0, 0
	}
	if c := m.Compaction; c.SummaryFromSeq > 0 {
		return c.SummaryFromSeq, c.SummaryToSeq
	}
	return m.Compaction.FromSeq, m.Compaction.ToSeq
}

// prune builds the compaction message and the commit that applies it: the
// message (is_compaction, CompactionMeta), the seqs it summarises, the
// messages it keeps cleared, and the new tail start. Token figures are
// filled in by the caller once counted. A compaction that only cleared
// keeps the summary in force word for word (the same content, so a
// provider's cached prefix stays valid through it).
func prune(in pruneInput) (session.Message, session.Commit) {
	prevID := ""
	if in.prev != nil {
		prevID = in.prev.ID
	}
	tailID, tailSeq := "", in.headSeq+1
	if len(in.tail) > 0 {
		tailID, tailSeq = in.tail[0].ID, in.tail[0].Seq
	}
	pinned := make([]int64, len(in.pinned))
	for i := range in.pinned {
		pinned[i] = in.pinned[i].Seq
	}
	summarised := make([]int64, len(in.selected))
	for i := range in.selected {
		summarised[i] = in.selected[i].Seq
	}
	meta := &session.CompactionMeta{
		SummaryText:    in.summary,
		TailStartID:    tailID,
		TailStartSeq:   tailSeq,
		Previous:       prevID,
		Messages:       len(in.selected),
		Model:          in.model,
		IdempotencyKey: in.key,
		RequestID:      in.requestID,
		Incremental:    in.incremental,
		Pinned:         pinned,
		CreatedAt:      in.now,
		Step:           in.step,
		Cleared:        in.cleared,
		Ledger:         in.ledger,
		LedgerBullets:  in.ledgerBullets,

		InstructionsDropped: in.instructionsDropped,
	}
	msg := session.Message{ID: CompactionID(in.key), Role: session.RoleUser, IsCompaction: true, Compaction: meta}
	from, to := summaryRange(in.prev)
	if len(in.selected) > 0 {
		first, last := in.selected[0], in.selected[len(in.selected)-1]
		meta.FromSeq, meta.ToSeq, meta.FromID, meta.ToID = first.Seq, last.Seq, first.ID, last.ID
		if from == 0 {
			from = first.Seq
		}
		from, to = min(from, first.Seq), last.Seq
		msg.Seq = last.Seq
		msg.Content = session.TextContent(fmt.Sprintf(summaryPreamble, from, to) + in.summary)
	} else if hasSummary(in.prev) {
		msg.Seq, msg.Content = in.prev.Seq, in.prev.Content
		if pm := in.prev.Compaction; pm != nil && in.ledger == nil {
			meta.Ledger, meta.LedgerBullets = pm.Ledger, pm.LedgerBullets
		}
	}
	meta.SummaryFromSeq, meta.SummaryToSeq = from, to
	if in.summary == "" {
		meta.SummaryFromSeq, meta.SummaryToSeq = 0, 0
	}
	return msg, session.Commit{
		SessionID:        in.sessionID,
		PrevCompactionID: prevID,
		Compaction:       msg,
		Pinned:           pinned,
		Summarised:       summarised,
		TailStartID:      tailID,
		TailStartSeq:     tailSeq,
		Now:              in.now,
	}
}

// commitFor rebuilds the commit of a stored compaction message, to finish a
// compaction whose commit was interrupted (its message written, its record
// not yet moved).
func commitFor(sessionID string, m *session.Message, now time.Time) session.Commit {
	meta := m.Compaction
	var summarised []int64
	for seq := meta.FromSeq; meta.Messages > 0 && seq >= 1 && seq <= meta.ToSeq; seq++ {
		summarised = append(summarised, seq)
	}
	return session.Commit{
		SessionID:        sessionID,
		PrevCompactionID: meta.Previous,
		Compaction:       *m,
		Pinned:           meta.Pinned,
		Summarised:       summarised,
		TailStartID:      meta.TailStartID,
		TailStartSeq:     meta.TailStartSeq,
		Now:              now,
	}
}
