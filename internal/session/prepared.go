package session

import "time"

// States of a PreparedCompaction.
const (
	// PreparedRunning: a replica claimed the preparation and is computing
	// it (Owner, StartedAt); another replica leaves it alone until
	// ClaimTTL has passed (its owner died).
	PreparedRunning = "preparing"
	// PreparedReady: Compaction holds the compaction, ready to commit
	// while the session's compaction in force is still Base.
	PreparedReady = "ready"
	// PreparedFailed: the preparation failed (Error); a request falls back
	// to the blocking path, and the next trigger may prepare again.
	PreparedFailed = "failed"
	// PreparedUsed: a request committed it (or a top-up built on it).
	PreparedUsed = "used"
	// PreparedStale: a compaction committed since it was prepared, before
	// any request used it: it can never be used.
	PreparedStale = "stale"
)

// PreparedCompaction is a compaction computed ahead of the request that
// will need it: the same steps as any compaction, stored but not
// committed, so the session's context does not change until a request
// commits it. A session has at most one (the latest preparation).
type PreparedCompaction struct {
	SessionID string `json:"session_id"`
	// Epoch is the session incarnation it was prepared for: one left by
	// a deleted session of the same id is never used.
	Epoch string `json:"epoch,omitempty"`
	State string `json:"state"`
	// Base is the compaction in force when it was prepared ("" for none):
	// it is usable only while the record's CompactionID is still Base.
	Base string `json:"base_compaction_id"`
	// HeadSeq is the session's head when it was prepared; messages after
	// it join the raw tail when the request commits it.
	HeadSeq int64 `json:"head_seq"`
	// FromSeq and ToSeq bound the range it summarises (its cut).
	FromSeq int64 `json:"from_seq,omitempty"`
	ToSeq   int64 `json:"to_seq,omitempty"`
	// Budget is its summary's budget in tokens: with the range, what a
	// request on another replica needs to tell whether waiting for a
	// running preparation pays.
	Budget int `json:"budget,omitempty"`
	// Compaction is the compaction message (ready only), its metadata
	// complete but for what the committing request adds.
	Compaction *Message `json:"compaction,omitempty"`
	// Owner names the process that prepares it.
	Owner     string    `json:"owner,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// Heartbeat is when the owner last said it is still preparing.
	Heartbeat time.Time `json:"heartbeat,omitzero"`
	ReadyAt   time.Time `json:"ready_at,omitzero"`
	// Usage of the summary model by the preparation.
	LLMCalls     int `json:"llm_calls,omitempty"`
	InputTokens  int `json:"input_tokens,omitempty"`
	OutputTokens int `json:"output_tokens,omitempty"`
	// Trigger says what asked for it: "near_budget" (a runtime's
	// ContextNearBudget) or "append" (the context passed prepare_at).
	Trigger string `json:"trigger,omitempty"`
	Error   string `json:"error,omitempty"`
	// Revision is the store's revision, for compare-and-set.
	Revision uint64 `json:"-"`
}

// Usable reports whether p can be committed on a session whose record is
// rec: ready, of this incarnation, built on the compaction in force, and
// no newer than the head.
func (p *PreparedCompaction) Usable(rec Record) bool {
	return p != nil && p.State == PreparedReady && p.Compaction != nil && p.Compaction.Compaction != nil &&
		p.Epoch == rec.Epoch && p.Base == rec.CompactionID && p.HeadSeq <= rec.HeadSeq
}

// Claimed reports whether a preparation is under way at now: running,
// and its owner heard from (started, or its last heartbeat) less than
// ttl ago: an owner that died stops beating.
func (p *PreparedCompaction) Claimed(now time.Time, ttl time.Duration) bool {
	if p == nil || p.State != PreparedRunning {
		return false
	}
	last := p.StartedAt
	if p.Heartbeat.After(last) {
		last = p.Heartbeat
	}
	return now.Before(last.Add(ttl))
}
