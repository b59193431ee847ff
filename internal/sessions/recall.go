package sessions

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/recall"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// DefaultRecallMemory bounds the memory of the search indexes a replica
// keeps (WithRecallMemory).
const DefaultRecallMemory = 256 << 20

// WithRecallMemory bounds the memory of the search indexes this replica
// keeps: the least recently searched sessions' are dropped past it, and
// built again from the store when searched again.
func WithRecallMemory(bytes int) Option {
	return func(s *Service) { s.recall = recall.NewCache(bytes) }
}

// Recall is the search indexes' cache (made on first use).
func (s *Service) Recall() *recall.Cache { return s.recallCache() }

func (s *Service) recallCache() *recall.Cache {
	s.recallOnce.Do(func() {
		if s.recall == nil {
			s.recall = recall.NewCache(DefaultRecallMemory)
		}
	})
	return s.recall
}

// indexed is what a search reads against: the session's record as of the
// search and the states of its messages.
type indexed struct {
	rec     session.Record
	cleared map[int64]bool
}

// state is what the context shows of message seq.
func (x indexed) state(seq int64) contract.MessageState {
	switch {
	case x.rec.CompactionID != "" && seq < x.rec.TailStartSeq && !slices.Contains(x.rec.PinnedSeqs, seq):
		return contract.StateSummarised
	case x.cleared[seq]:
		return contract.StateCleared
	}
	return contract.StateRaw
}

// withIndex runs f on the session's index, brought up to the session's
// head first: the messages appended since it was last read are added (one
// read of them), and an index of an earlier incarnation of the session
// (deleted and created again) is built anew. A replica that never saw the
// session builds it from the log.
func (s *Service) withIndex(ctx context.Context, sid string, f func(ix *recall.Index, x indexed) error) error {
	key := tenant.Key(tenant.From(ctx), sid)
	return s.recallCache().With(key, func(e *recall.Entry) error {
		from := int64(1)
		if e.Index != nil {
			from = e.Index.Head() + 1
		}
		var rec session.Record
		var msgs []session.Message
		err := s.retry(ctx, func() (err error) {
			rec, msgs, err = s.store.Messages(ctx, sid, session.Seqs{From: from})
			return err
		})
		if err != nil {
			return err
		}
		if e.Index == nil || e.Epoch != rec.Epoch {
			e.Index, e.Epoch, e.CompactionID, e.Cleared = recall.NewIndex(), rec.Epoch, "", nil
			if from > 1 {
				if err := s.retry(ctx, func() (err error) {
					rec, msgs, err = s.store.Messages(ctx, sid, session.Seqs{From: 1})
					return err
				}); err != nil {
					return err
				}
			}
		}
		for i := range msgs {
			e.Index.Add(recall.DocOf(&msgs[i]))
		}
		if e.CompactionID != rec.CompactionID {
			cleared, err := s.clearedBy(ctx, sid, rec.CompactionID)
			if err != nil {
				return err
			}
			e.CompactionID, e.Cleared = rec.CompactionID, cleared
		}
		return f(e.Index, indexed{rec: rec, cleared: e.Cleared})
	})
}

// clearedBy is the seqs compaction id's context shows cleared.
func (s *Service) clearedBy(ctx context.Context, sid, id string) (map[int64]bool, error) {
	out := map[int64]bool{}
	if id == "" {
		return out, nil
	}
	var m *session.Message
	if err := s.retry(ctx, func() (err error) {
		m, err = s.store.Compaction(ctx, sid, id)
		return err
	}); err != nil {
		return nil, err
	}
	if m.Compaction != nil {
		for _, c := range m.Compaction.Cleared {
			out[c.Seq] = true
		}
	}
	return out, nil
}

// checkSearch checks a search's body and fills in its defaults.
func checkSearch(b *contract.SearchBody) (*regexp.Regexp, error) {
	b.Query = strings.TrimSpace(b.Query)
	switch {
	case b.Query == "":
		return nil, fmt.Errorf("%w: a search needs a query", session.ErrInvalid)
	case len(b.Query) > contract.MaxQueryBytes:
		return nil, fmt.Errorf("%w: the query is %d bytes, at most %d", session.ErrInvalid, len(b.Query), contract.MaxQueryBytes)
	case b.Limit < 0 || b.Limit > contract.MaxSearchHits:
		return nil, fmt.Errorf("%w: limit %d is not 1..%d", session.ErrInvalid, b.Limit, contract.MaxSearchHits)
	case b.FromSeq < 0 || b.ToSeq < 0 || b.ToSeq > 0 && b.ToSeq < b.FromSeq:
		return nil, fmt.Errorf("%w: the seq range %d..%d is empty", session.ErrInvalid, b.FromSeq, b.ToSeq)
	}
	if b.Limit == 0 {
		b.Limit = contract.DefaultSearchHits
	}
	for _, r := range b.Roles {
		if !session.Role(r).Valid() {
			return nil, fmt.Errorf("%w: role %q is not system, user, assistant or tool", session.ErrInvalid, r)
		}
	}
	for _, st := range b.States {
		if !slices.Contains(contract.MessageStates, st) {
			return nil, fmt.Errorf("%w: state %q is not raw, cleared or summarised", session.ErrInvalid, st)
		}
	}
	switch b.Mode {
	case "":
		b.Mode = contract.SearchTerms
	case contract.SearchTerms, contract.SearchSubstring:
	case contract.SearchRegex:
		re, err := regexp.Compile(b.Query)
		if err != nil {
			return nil, fmt.Errorf("%w: the query is not a regular expression (RE2): %v", session.ErrInvalid, err)
		}
		return re, nil
	default:
		return nil, fmt.Errorf("%w: mode %q is not terms, substring or regex", session.ErrInvalid, b.Mode)
	}
	return nil, nil
}

// Search finds a session's stored messages, whatever compaction did with
// them: ranked by the query's terms (the default), or the latest that hold
// it as written or match it as a regular expression; each hit with a
// snippet (it and a neighbour each side, within contract.SnippetTokens).
func (s *Service) Search(ctx context.Context, b contract.SearchBody) (contract.SearchAnswer, error) {
	re, err := checkSearch(&b)
	if err != nil {
		return contract.SearchAnswer{}, err
	}
	ans := contract.SearchAnswer{SessionID: b.SessionID, Query: b.Query, Mode: b.Mode, Hits: []contract.SearchHit{}}
	if b.AllSessions {
		return s.searchTenant(ctx, b, ans)
	}
	hits, x, err := s.searchOne(ctx, b, re)
	if err != nil {
		return ans, err
	}
	ans.HeadSeq = x.rec.HeadSeq
	shown, err := s.hitsOf(ctx, b.SessionID, hits, x, b.Query)
	ans.Hits = append(ans.Hits, shown...)
	return ans, err
}

// searchOne is one session's hits for b, and what they are read against.
func (s *Service) searchOne(ctx context.Context, b contract.SearchBody, re *regexp.Regexp) ([]recall.Hit, indexed, error) {
	var hits []recall.Hit
	var x indexed
	err := s.withIndex(ctx, b.SessionID, func(ix *recall.Index, got indexed) error {
		x = got
		if b.Mode == contract.SearchTerms {
			hits = ix.Search(recall.Query{Text: b.Query, Roles: b.Roles, FromSeq: b.FromSeq, ToSeq: b.ToSeq, Limit: b.Limit, Allow: x.allows(b.States)})
		}
		return nil
	})
	if err != nil || b.Mode == contract.SearchTerms {
		return hits, x, err
	}
	hits, err = s.scan(ctx, b, re, x)
	return hits, x, err
}

// hitsOf is hits as the answer shows them: one read of every hit's message
// and neighbours, then the snippets.
func (s *Service) hitsOf(ctx context.Context, sid string, hits []recall.Hit, x indexed, query string) ([]contract.SearchHit, error) {
	count, err := s.counter(x.rec.Model)
	if err != nil {
		return nil, err
	}
	var seqs []int64
	for _, h := range hits {
		seqs = append(seqs, h.Seq-1, h.Seq, h.Seq+1)
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	var msgs []session.Message
	if len(seqs) > 0 {
		if err := s.retry(ctx, func() (err error) {
			_, msgs, err = s.store.Messages(ctx, sid, session.Seqs{Only: seqs})
			return err
		}); err != nil {
			return nil, err
		}
	}
	out := make([]contract.SearchHit, 0, len(hits))
	for _, h := range hits {
		out = append(out, x.hit(h, msgs, query, count.Count))
	}
	return out, nil
}

// searchTenant searches the session's tenant's sessions (the
// contract.MaxTenantSearchSessions last written, b's own among them),
// each on its own index, and answers the best hits of all, each naming
// its session. Scores are each index's BM25: comparable, not equal.
func (s *Service) searchTenant(ctx context.Context, b contract.SearchBody, ans contract.SearchAnswer) (contract.SearchAnswer, error) {
	if b.Mode != contract.SearchTerms {
		return ans, fmt.Errorf("%w: all_sessions searches in mode terms only", session.ErrInvalid)
	}
	sids, err := s.recentSessions(ctx, b.SessionID)
	if err != nil {
		return ans, err
	}
	type found struct {
		sid string
		h   recall.Hit
		x   indexed
	}
	var all []found
	for _, sid := range sids {
		one := b
		one.SessionID = sid
		hits, x, err := s.searchOne(ctx, one, nil)
		if errors.Is(err, session.ErrNotFound) && sid != b.SessionID {
			continue // deleted since it was listed
		}
		if err != nil {
			return ans, err
		}
		if sid == b.SessionID {
			ans.HeadSeq = x.rec.HeadSeq
		}
		for _, h := range hits {
			all = append(all, found{sid, h, x})
		}
	}
	slices.SortStableFunc(all, func(p, q found) int { return cmp.Compare(q.h.Score, p.h.Score) })
	for _, f := range all[:min(len(all), b.Limit)] {
		shown, err := s.hitsOf(ctx, f.sid, []recall.Hit{f.h}, f.x, b.Query)
		if err != nil {
			return ans, err
		}
		for i := range shown {
			shown[i].SessionID = f.sid
		}
		ans.Hits = append(ans.Hits, shown...)
	}
	return ans, nil
}

// recentSessions are the caller's tenant's sessions last written, at most
// contract.MaxTenantSearchSessions, sid first.
func (s *Service) recentSessions(ctx context.Context, sid string) ([]string, error) {
	var listed []session.Listed
	opt := session.ListOptions{Limit: session.MaxPageSize}
	for {
		page, err := s.List(ctx, opt)
		if err != nil {
			return nil, err
		}
		listed = append(listed, page.Sessions...)
		if page.Next == "" || len(listed) >= 10*contract.MaxTenantSearchSessions {
			break
		}
		opt.After = page.Next
	}
	slices.SortStableFunc(listed, func(p, q session.Listed) int { return q.UpdatedAt.Compare(p.UpdatedAt) })
	out := []string{sid}
	for _, l := range listed {
		if len(out) == contract.MaxTenantSearchSessions {
			break
		}
		if l.SessionID != sid {
			out = append(out, l.SessionID)
		}
	}
	return out, nil
}

// allows is a hit's filter by state (nil: any).
func (x indexed) allows(states []contract.MessageState) func(int64) bool {
	if len(states) == 0 {
		return nil
	}
	return func(seq int64) bool { return slices.Contains(states, x.state(seq)) }
}

// hit is h as the answer shows it: msgs are its message and neighbours.
func (x indexed) hit(h recall.Hit, msgs []session.Message, query string, count func(string) int) contract.SearchHit {
	var before, at, after *session.Message
	for i := range msgs {
		switch msgs[i].Seq {
		case h.Seq - 1:
			before = &msgs[i]
		case h.Seq:
			at = &msgs[i]
		case h.Seq + 1:
			after = &msgs[i]
		}
	}
	out := contract.SearchHit{Seq: h.Seq, State: x.state(h.Seq), Score: h.Score}
	if at == nil {
		return out
	}
	out.ID, out.Role = at.ID, string(at.Role)
	if out.State == contract.StateSummarised {
		out.CompactionID = x.rec.CompactionID
	}
	out.Snippet = recall.Snippet(before, at, after, query, count)
	for i := range out.Snippet {
		out.Snippet[i].State = x.state(out.Snippet[i].Seq)
	}
	return out
}

// scanPage is how many messages a substring or regex search reads at a
// time, from the head back.
const scanPage = 500

// scan is a substring or regex search: the latest messages that match,
// read back from the head a page at a time.
func (s *Service) scan(ctx context.Context, b contract.SearchBody, re *regexp.Regexp, x indexed) ([]recall.Hit, error) {
	lower := strings.ToLower(b.Query)
	matches := func(m *session.Message) bool {
		if re != nil {
			return re.MatchString(recall.Text(m))
		}
		return strings.Contains(strings.ToLower(recall.Text(m)), lower)
	}
	allow := x.allows(b.States)
	to := x.rec.HeadSeq
	if b.ToSeq > 0 {
		to = min(to, b.ToSeq)
	}
	from := max(b.FromSeq, 1)
	var hits []recall.Hit
	for hi := to; hi >= from && len(hits) < b.Limit; hi -= scanPage {
		var msgs []session.Message
		if err := s.retry(ctx, func() (err error) {
			_, msgs, err = s.store.Messages(ctx, b.SessionID, session.Seqs{From: max(hi-scanPage+1, from), To: hi})
			return err
		}); err != nil {
			return nil, err
		}
		for i := len(msgs) - 1; i >= 0 && len(hits) < b.Limit; i-- {
			m := &msgs[i]
			if (len(b.Roles) == 0 || slices.Contains(b.Roles, string(m.Role))) && (allow == nil || allow(m.Seq)) && matches(m) {
				hits = append(hits, recall.Hit{Seq: m.Seq})
			}
		}
	}
	return hits, nil
}

// Expanded answers Expand: a page of stored messages, each with its state,
// and where the next page starts.
type Expanded struct {
	SessionID string                  `json:"session_id"`
	Messages  []session.Message       `json:"messages"`
	States    []contract.MessageState `json:"states"`
	// Next, when set, is the After of the next page.
	Next int64 `json:"next,omitempty"`
	// Omitted are messages of the page over one answer: read each with
	// compactor.session.message and "part".
	Omitted []int64 `json:"omitted,omitempty"`
}

// Expand reads back the originals behind a compaction, a tool call and
// its results, or a seq range, a page at a time.
func (s *Service) Expand(ctx context.Context, b contract.ExpandBody) (Expanded, error) {
	if b.Limit < 0 || b.Limit > contract.MaxExpandMessages {
		return Expanded{}, fmt.Errorf("%w: limit %d is not 1..%d", session.ErrInvalid, b.Limit, contract.MaxExpandMessages)
	}
	if b.Limit == 0 {
		b.Limit = contract.MaxExpandMessages
	}
	var seqs []int64
	var x indexed
	err := s.withIndex(ctx, b.SessionID, func(ix *recall.Index, got indexed) (err error) {
		x = got
		seqs, err = s.expandSeqs(ctx, b, ix, got.rec)
		return err
	})
	if err != nil {
		return Expanded{}, err
	}
	out := Expanded{SessionID: b.SessionID, Messages: []session.Message{}, States: []contract.MessageState{}}
	i, _ := slices.BinarySearch(seqs, b.After+1)
	seqs = seqs[i:]
	if len(seqs) > b.Limit {
		out.Next = seqs[b.Limit-1]
		seqs = seqs[:b.Limit]
	}
	if len(seqs) == 0 {
		return out, nil
	}
	var msgs []session.Message
	if err := s.retry(ctx, func() (err error) {
		_, msgs, err = s.store.Messages(ctx, b.SessionID, session.Seqs{Only: seqs})
		return err
	}); err != nil {
		return out, err
	}
	want := map[int64]bool{}
	for _, q := range seqs {
		want[q] = true
	}
	size := 0
	for _, m := range msgs {
		if !want[m.Seq] {
			continue
		}
		n := jsonSize(&m)
		if n > contract.MaxExpandBytes {
			out.Omitted = append(out.Omitted, m.Seq)
			continue
		}
		if size+n > contract.MaxExpandBytes && len(out.Messages) > 0 {
			out.Next = out.Messages[len(out.Messages)-1].Seq
			break
		}
		size += n
		out.Messages, out.States = append(out.Messages, m), append(out.States, x.state(m.Seq))
	}
	return out, nil
}

// expandSeqs are the seqs an expand reads, ascending.
func (s *Service) expandSeqs(ctx context.Context, b contract.ExpandBody, ix *recall.Index, rec session.Record) ([]int64, error) {
	set := 0
	for _, named := range []bool{b.CompactionID != "", b.ToolCallID != "", b.FromSeq > 0 || b.ToSeq > 0} {
		if named {
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("%w: expand takes one of compaction_id, tool_call_id or from_seq/to_seq", session.ErrInvalid)
	}
	switch {
	case b.ToolCallID != "":
		seqs := slices.Clone(ix.Call(b.ToolCallID))
		if len(seqs) == 0 {
			return nil, fmt.Errorf("session %s: no tool call %q: %w", b.SessionID, b.ToolCallID, session.ErrNotFound)
		}
		slices.Sort(seqs)
		return seqs, nil
	case b.CompactionID != "":
		var m *session.Message
		if err := s.retry(ctx, func() (err error) {
			m, err = s.store.Compaction(ctx, b.SessionID, b.CompactionID)
			return err
		}); err != nil {
			return nil, err
		}
		meta := m.Compaction
		if meta == nil {
			return nil, fmt.Errorf("session %s: compaction %s has no metadata: %w", b.SessionID, b.CompactionID, session.ErrNotFound)
		}
		from, to := meta.SummaryFromSeq, meta.SummaryToSeq
		if to == 0 {
			from, to = meta.FromSeq, meta.ToSeq
		}
		var seqs []int64
		for q := max(from, 1); q <= to; q++ {
			if !slices.Contains(meta.Pinned, q) {
				seqs = append(seqs, q)
			}
		}
		return seqs, nil
	}
	from, to := max(b.FromSeq, 1), b.ToSeq
	if to == 0 || to > rec.HeadSeq {
		to = rec.HeadSeq
	}
	if to < from {
		return nil, nil
	}
	seqs := make([]int64, 0, to-from+1)
	for q := from; q <= to; q++ {
		seqs = append(seqs, q)
	}
	return seqs, nil
}

func jsonSize(m *session.Message) int {
	b, _ := json.Marshal(m)
	return len(b)
}
