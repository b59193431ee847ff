// Package sessions holds what runtimes and operators do with a session —
// create it, append to it, read what the model sees, read one stored
// message, delete it — over any store that keeps sessions: the JetStream KV
// store in the service, the in-memory one for files and tests. Transports
// (the micro endpoints, the CLI) decode, call these and answer; the rules
// live here once.
//
// Writes are safe to repeat: a create repeated with the same content
// succeeds, an append's messages are written once each (by id). So the use
// cases retry a store that is briefly unavailable (a leader failover) within
// a bound, and a caller that got no answer may simply send again.
package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/recall"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/tokens"
)

// Store keeps sessions: the pipeline's interface plus what runtimes use.
type Store interface {
	pipeline.SessionStore
	// Create stores a new session with its first messages, all or nothing;
	// the same create again answers the session, another content for the
	// id session.ErrExists.
	Create(ctx context.Context, rec session.Record, msgs []session.Message) (session.Record, error)
	// AppendWith adds messages at the head, each id once.
	AppendWith(ctx context.Context, sessionID string, msgs []session.Message, opt session.AppendOptions) (session.Appended, error)
	Record(ctx context.Context, sessionID string) (session.Record, error)
	Message(ctx context.Context, sessionID string, seq int64) (session.Message, error)
	// Messages answers the record and the stored messages sel names, in
	// one read.
	Messages(ctx context.Context, sessionID string, sel session.Seqs) (session.Record, []session.Message, error)
	History(ctx context.Context, sessionID string) (msgs, compactions []session.Message, err error)
	// Delete removes every value of the session; none is not an error.
	Delete(ctx context.Context, sessionID string) error
	// List answers a page of sessions (session.ListOptions).
	List(ctx context.Context, opt session.ListOptions) (session.SessionPage, error)
	// PutUploadPart, UploadParts and DeleteUpload keep a large message's
	// parts until an append names it (see Upload).
	PutUploadPart(ctx context.Context, sessionID, uploadID string, part, parts int, data []byte) error
	UploadParts(ctx context.Context, sessionID, uploadID string) ([]byte, error)
	DeleteUpload(ctx context.Context, sessionID, uploadID string) error
}

// Breakers is what deleting a session needs of the breaker store.
type Breakers interface {
	Delete(ctx context.Context, sessionID string) error
	// Reset closes the session's breaker and returns its state before.
	Reset(ctx context.Context, sessionID string, now time.Time) (session.Breaker, error)
}

// DefaultRetryFor bounds how long a use case retries a store that is
// unavailable (a leader election on a cluster takes a few seconds).
const DefaultRetryFor = 15 * time.Second

// DefaultModel is a session's model when its creator names none.
const DefaultModel = "gpt-4o"

// Service runs the use cases. It is safe for concurrent use.
type Service struct {
	store    Store
	breakers Breakers
	table    *models.Table
	retryFor time.Duration
	quotas   Quotas
	images   int // what an image of unknown size counts (0: the default)
	hooks    Hooks
	// recall holds the search indexes (recall.go), made on first use.
	recall     *recall.Cache
	recallOnce sync.Once
}

// Hooks are told of what the use case wrote, whichever driver called it
// (the endpoints, a replay, a gateway): the one seam through which writes
// reach what follows them (the preparer subscribes, issue 44). They run on
// the caller's goroutine, after the write: they must not block.
type Hooks struct {
	// Created is told of every create answered (a repeated one too).
	Created func(ctx context.Context, c Created)
	// Appended is told of every append that applied messages.
	Appended func(ctx context.Context, a Appended)
}

// WithHooks sets the hooks told of the writes.
func WithHooks(h Hooks) Option { return func(s *Service) { s.hooks = h } }

// Quotas answers a tenant's quotas of what it stores (quota.Quotas).
type Quotas interface {
	// Write admits a create (newSession) or an append of bytes
	// (session.TextBytes) by ctx's tenant.
	Write(ctx context.Context, newSession bool, bytes int64) error
	// Wrote records what a write stored.
	Wrote(ctx context.Context, sessions int, bytes int64)
}

// WithQuotas has creates and appends admitted by q first: one over a
// quota of its tenant is refused (a *tenant.QuotaError) and stores nothing.
func WithQuotas(q Quotas) Option { return func(s *Service) { s.quotas = q } }

// WithImageEstimate counts an image of unknown size as n tokens (the
// compaction config's image_tokens; 0: tokens.DefaultImageTokens), as the
// pipeline does.
func WithImageEstimate(n int) Option { return func(s *Service) { s.images = n } }

// Option tunes a Service.
type Option func(*Service)

// WithRetryFor sets how long an unavailable store is retried (0: not at
// all).
func WithRetryFor(d time.Duration) Option { return func(s *Service) { s.retryFor = max(d, 0) } }

// New returns the use cases over store and breakers (nil: deleting a
// session leaves its breaker), counting tokens with table's encodings
// (nil: the shipped table).
func New(store Store, breakers Breakers, table *models.Table, opts ...Option) *Service {
	if table == nil {
		table = models.Default()
	}
	s := &Service{store: store, breakers: breakers, table: table, retryFor: DefaultRetryFor}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Store returns the store the service writes to.
func (s *Service) Store() Store { return s.store }

// retry runs f until it succeeds, fails for a reason other than an
// unavailable store, or retryFor has passed, with jittered backoff.
func (s *Service) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(s.retryFor)
	wait := 100 * time.Millisecond
	for {
		err := f()
		if !errors.Is(err, session.ErrUnavailable) || !time.Now().Add(wait).Before(deadline) {
			return err
		}
		t := time.NewTimer(time.Duration(float64(wait) * (0.5 + rand.Float64())))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (s *Service) counter(model string) (*tokens.Counter, error) {
	c, err := tokens.ForEncoding(s.table.Lookup(model).Encoding)
	if err != nil {
		return nil, err
	}
	return c.WithImageEstimate(s.images), nil
}

// Count fills in the token counts msgs do not store yet (an append's
// messages are counted when a compaction reads them), with model's
// encoding.
func (s *Service) Count(model string, msgs []session.Message) error {
	c, err := s.counter(model)
	if err != nil {
		return err
	}
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	return nil
}

// LimitOf is a session's context limit: its own, else its model's window.
func (s *Service) LimitOf(rec session.Record) int {
	if rec.ContextLimit > 0 {
		return rec.ContextLimit
	}
	return s.table.Lookup(rec.Model).ContextWindow
}

// Created is what creating a session answers (the same when repeated).
type Created struct {
	SessionID    string `json:"session_id"`
	Model        string `json:"model"`
	ContextLimit int    `json:"context_limit"`
	Messages     int    `json:"messages"`
	HeadSeq      int64  `json:"head_seq"`
	Tokens       int    `json:"tokens"`
}

// Create stores a new session with msgs, each counted with the model's
// encoding (an empty id gets a new UUID; an empty model DefaultModel). It
// returns session.ErrExists for an id taken by another content and
// session.ErrInvalid for a bad id or message; repeated with the same
// content it succeeds and changes nothing.
func (s *Service) Create(ctx context.Context, rec session.Record, msgs []session.Message) (Created, error) {
	if rec.SessionID == "" {
		rec.SessionID = uuid.NewString()
	}
	if rec.Model == "" {
		rec.Model = DefaultModel
	}
	if rec.ContextLimit < 0 {
		return Created{}, fmt.Errorf("%w: context_limit must be >= 0", session.ErrInvalid)
	}
	c, err := s.counter(rec.Model)
	if err != nil {
		return Created{}, err
	}
	msgs = slices.Clone(msgs)
	for i := range msgs {
		msgs[i].Tokens = 0 // counted here, never trusted from the caller
		c.Ensure(&msgs[i])
	}
	total := c.Context(msgs) // as the context is counted: with the reply priming
	var bytes int64
	for i := range msgs {
		bytes += int64(session.TextBytes(&msgs[i]))
	}
	if s.quotas != nil {
		if err := s.quotas.Write(ctx, true, bytes); err != nil {
			// A repeated create is no new session: the store answers it.
			if _, lerr := s.store.Load(ctx, rec.SessionID, false); lerr != nil {
				return Created{}, err
			}
		}
	}
	var stored session.Record
	start := time.Now()
	err = s.retry(ctx, func() (err error) {
		stored, err = s.store.Create(ctx, rec, msgs)
		return err
	})
	if err != nil {
		return Created{}, err
	}
	if s.quotas != nil && !stored.CreatedAt.Before(start) {
		// Created now: a repeat answers the session created before (by
		// a replica whose clock is ahead, it counts until the next scan).
		s.quotas.Wrote(ctx, 1, bytes)
	}
	out := Created{SessionID: rec.SessionID, Model: rec.Model, ContextLimit: s.LimitOf(rec), Messages: len(msgs),
		HeadSeq: stored.HeadSeq, Tokens: total}
	if s.hooks.Created != nil {
		s.hooks.Created(ctx, out)
	}
	return out, nil
}

// Appended is what an append answers.
type Appended struct {
	SessionID string `json:"session_id"`
	// Status is "applied" when the append wrote messages,
	// "already_applied" when every message was stored already under its
	// id (a repeated append: nothing changed).
	Status string `json:"status"`
	// HeadSeq is the session's head after the append.
	HeadSeq  int64             `json:"head_seq"`
	Messages []AppendedMessage `json:"messages"`
	// IDs, FirstSeq and LastSeq sum up Messages.
	IDs      []string `json:"ids"`
	FirstSeq int64    `json:"first_seq"`
	LastSeq  int64    `json:"last_seq"`
	// Bytes is the size of the text of the messages applied (content,
	// tool calls, names): what a runtime may estimate their tokens from.
	// The service counts tokens when a compaction needs them, not at the
	// append.
	Bytes int `json:"bytes"`
	// SessionBytes is the session's text after the append (the store's
	// Record.Bytes; 0 where it does not say), for the hooks.
	SessionBytes int64 `json:"-"`
}

// AppendedMessage says where one message of an append is.
type AppendedMessage struct {
	ID      string `json:"id"`
	Seq     int64  `json:"seq"`
	Applied bool   `json:"applied"`
}

// Append statuses.
const (
	StatusApplied        = "applied"
	StatusAlreadyApplied = "already_applied"
)

// Append adds msgs at the session's head, uncounted (see Appended.Bytes).
// A message whose id the session holds is not written again (give ids to
// make a retried append safe: one without gets a new UUID).
// With opt.ExpectedHeadSeq set it applies only at that head, else it
// returns a *session.HeadMovedError.
func (s *Service) Append(ctx context.Context, sid string, msgs []session.Message, opt session.AppendOptions) (Appended, error) {
	if len(msgs) == 0 {
		return Appended{}, fmt.Errorf("%w: messages is required", session.ErrInvalid)
	}
	msgs = slices.Clone(msgs)
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = uuid.NewString() // once: every retry below writes the same id
		}
		// Not counted here: the compaction that needs the count counts
		// it (once per process, tokens' cache), off the append's path.
		msgs[i].Tokens = 0
	}
	if s.quotas != nil {
		var bytes int64
		for i := range msgs {
			bytes += int64(session.TextBytes(&msgs[i]))
		}
		if err := s.quotas.Write(ctx, false, bytes); err != nil {
			return Appended{}, err
		}
	}
	var a session.Appended
	err := s.retry(ctx, func() (err error) {
		a, err = s.store.AppendWith(ctx, sid, msgs, opt)
		return err
	})
	if err != nil {
		return Appended{}, err
	}
	out := Appended{SessionID: sid, Status: StatusAlreadyApplied, HeadSeq: a.HeadSeq, SessionBytes: a.Bytes}
	for i, m := range a.Messages {
		out.Messages = append(out.Messages, AppendedMessage{ID: m.ID, Seq: m.Seq, Applied: a.New[i]})
		out.IDs = append(out.IDs, m.ID)
		if a.New[i] {
			out.Status = StatusApplied
			out.Bytes += session.TextBytes(&m)
		}
	}
	out.FirstSeq, out.LastSeq = a.Messages[0].Seq, a.Messages[len(a.Messages)-1].Seq
	if s.quotas != nil {
		s.quotas.Wrote(ctx, 0, int64(out.Bytes))
	}
	if s.hooks.Appended != nil && out.Status == StatusApplied {
		s.hooks.Appended(ctx, out)
	}
	return out, nil
}

// ContextView is what the model sees now: pinned messages, the summary and
// the raw tail, with their token count.
type ContextView struct {
	SessionID    string            `json:"session_id"`
	Model        string            `json:"model"`
	ContextLimit int               `json:"context_limit"`
	HeadSeq      int64             `json:"head_seq"`
	Tokens       int               `json:"tokens"`
	CompactionID string            `json:"compaction_id,omitempty"`
	Messages     []session.Message `json:"messages"`
}

// Context returns what the model sees now for the session.
func (s *Service) Context(ctx context.Context, sid string) (ContextView, error) {
	var sess *session.Session
	err := s.retry(ctx, func() (err error) {
		sess, err = s.store.Load(ctx, sid, false)
		return err
	})
	if err != nil {
		return ContextView{}, err
	}
	c, err := s.counter(sess.Record.Model)
	if err != nil {
		return ContextView{}, err
	}
	msgs := pipeline.ContextOf(sess)
	tokens := c.Context(msgs)
	unplaced(msgs)
	return ContextView{SessionID: sid, Model: sess.Record.Model, ContextLimit: s.LimitOf(sess.Record), HeadSeq: sess.Record.HeadSeq,
		Tokens: tokens, CompactionID: sess.Record.CompactionID, Messages: msgs}, nil
}

// unplaced answers each compaction message of msgs with seq 0: it has no
// place in the session's sequence (its compaction's from_seq and to_seq
// say what it covers). It carried the seq of the last message it
// summarised, so two messages answered one seq.
func unplaced(msgs []session.Message) {
	for i := range msgs {
		if msgs[i].IsCompaction {
			msgs[i].Seq = 0
		}
	}
}

// Message returns the session's stored message with seq, summarised or
// not: the original of what a compaction summarised.
func (s *Service) Message(ctx context.Context, sid string, seq int64) (session.Message, error) {
	var m session.Message
	err := s.retry(ctx, func() (err error) {
		m, err = s.store.Message(ctx, sid, seq)
		return err
	})
	return m, err
}

// History is a session's record, every message (summarised ones marked
// with summarised_by) and every committed compaction.
type History struct {
	Record      session.Record    `json:"record"`
	Messages    []session.Message `json:"messages"`
	Compactions []session.Message `json:"compactions"`
	// Prepared lists the session's prepared compaction (at most one):
	// computed ahead, not committed.
	Prepared []Prepared `json:"prepared"`
}

// Prepared is a prepared compaction as History shows it: Usable says
// whether a request would commit it now (ready, and built on the
// compaction in force).
type Prepared struct {
	session.PreparedCompaction
	Usable bool `json:"usable"`
}

// History returns the session's full history: nothing is ever dropped.
func (s *Service) History(ctx context.Context, sid string) (History, error) {
	var h History
	err := s.retry(ctx, func() (err error) {
		if h.Record, err = s.store.Record(ctx, sid); err != nil {
			return err
		}
		if h.Messages, h.Compactions, err = s.store.History(ctx, sid); err != nil {
			return err
		}
		h.Prepared = nil
		if ps, ok := s.store.(pipeline.PreparedStore); ok {
			p, err := ps.Prepared(ctx, sid)
			switch {
			case err == nil && p.Epoch == h.Record.Epoch:
				h.Prepared = append(h.Prepared, Prepared{PreparedCompaction: p, Usable: p.Usable(h.Record)})
			case err != nil && !errors.Is(err, session.ErrNotFound):
				return err
			}
		}
		return nil
	})
	if h.Compactions == nil {
		h.Compactions = []session.Message{}
	}
	unplaced(h.Compactions)
	if h.Prepared == nil {
		h.Prepared = []Prepared{}
	}
	return h, err
}

// Deleted is what deleting a session answers: the same whether it existed
// or not, so a repeated delete answers the same.
type Deleted struct {
	SessionID string `json:"session_id"`
	Deleted   bool   `json:"deleted"`
}

// Delete removes every trace of the session: its record, messages (large
// ones' chunks too), id index, compactions and breaker.
func (s *Service) Delete(ctx context.Context, sid string) (Deleted, error) {
	err := s.retry(ctx, func() error {
		if err := s.store.Delete(ctx, sid); err != nil {
			return err
		}
		if s.breakers != nil {
			return s.breakers.Delete(ctx, sid)
		}
		return nil
	})
	if err != nil {
		return Deleted{}, err
	}
	s.recallCache().Drop(tenant.Key(tenant.From(ctx), sid))
	return Deleted{SessionID: sid, Deleted: true}, nil
}

// List answers a page of the stored sessions that pass opt's filters;
// the page's Next is the cursor of the next.
func (s *Service) List(ctx context.Context, opt session.ListOptions) (session.SessionPage, error) {
	var page session.SessionPage
	err := s.retry(ctx, func() (err error) {
		page, err = s.store.List(ctx, opt)
		return err
	})
	return page, err
}

// ResetBreaker closes the session's breaker (an operator's move) and
// returns its state before the reset: when that was open, the caller
// publishes CompactionCircuitClosed (events.ResetBreaker). Resetting a
// closed breaker changes nothing.
func (s *Service) ResetBreaker(ctx context.Context, sid string) (session.Breaker, error) {
	if sid == "" {
		return session.Breaker{}, fmt.Errorf("%w: session_id is required", session.ErrInvalid)
	}
	if s.breakers == nil {
		return session.Breaker{}, errors.New("sessions: no breaker store")
	}
	var prev session.Breaker
	err := s.retry(ctx, func() (err error) {
		prev, err = s.breakers.Reset(ctx, sid, time.Now())
		return err
	})
	return prev, err
}

// Sweeper is a store that can delete idle sessions itself.
type Sweeper interface {
	// Sweep deletes the sessions nobody wrote to within ttl, of every
	// tenant, and returns them.
	Sweep(ctx context.Context, ttl time.Duration) ([]tenant.Session, error)
}

// Sweep deletes the sessions nobody wrote to within ttl, with their
// breakers, and returns how many; a store that cannot sweep deletes none.
func (s *Service) Sweep(ctx context.Context, ttl time.Duration) (int, error) {
	sw, ok := s.store.(Sweeper)
	if !ok || ttl <= 0 {
		return 0, nil
	}
	ids, err := sw.Sweep(ctx, ttl)
	for _, ts := range ids {
		if s.breakers != nil {
			if berr := s.breakers.Delete(tenant.With(ctx, ts.Tenant), ts.ID); berr != nil && err == nil {
				err = berr
			}
		}
	}
	return len(ids), err
}

// Uploaded is what storing an upload's part answers.
type Uploaded struct {
	SessionID string `json:"session_id"`
	UploadID  string `json:"upload_id"`
	Part      int    `json:"part"`
	Parts     int    `json:"parts"`
	Bytes     int    `json:"bytes"`
}

// Upload stores part (0-based) of parts of a message too large for one
// request: the message's JSON, cut anywhere. An append then names it with
// {"upload_id": id} in place of the message (ResolveUploads); the parts
// are removed once it is appended. The same part again replaces it.
func (s *Service) Upload(ctx context.Context, sid, uploadID string, part, parts int, data []byte) (Uploaded, error) {
	switch {
	case uploadID == "" || len(uploadID) > session.MaxIDBytes:
		return Uploaded{}, fmt.Errorf("%w: upload_id must be 1-%d bytes", session.ErrInvalid, session.MaxIDBytes)
	case parts < 1 || parts > contract.MaxUploadParts || part < 0 || part >= parts:
		return Uploaded{}, fmt.Errorf("%w: part %d of %d: want 0 <= part < parts <= %d", session.ErrInvalid, part, parts, contract.MaxUploadParts)
	case len(data) == 0 || len(data) > contract.MaxUploadPartBytes:
		return Uploaded{}, fmt.Errorf("%w: a part is 1 to %d bytes, got %d", session.ErrInvalid, contract.MaxUploadPartBytes, len(data))
	}
	err := s.retry(ctx, func() error { return s.store.PutUploadPart(ctx, sid, uploadID, part, parts, data) })
	if err != nil {
		return Uploaded{}, err
	}
	return Uploaded{SessionID: sid, UploadID: uploadID, Part: part, Parts: parts, Bytes: len(data)}, nil
}

// ResolveUploads replaces, in a JSON array of messages, each element that
// is {"upload_id": id} by the message uploaded under id, and returns the
// array and the upload ids it used.
func (s *Service) ResolveUploads(ctx context.Context, sid string, raw json.RawMessage) (json.RawMessage, []string, error) {
	if !bytes.Contains(raw, []byte(`"upload_id"`)) {
		return raw, nil, nil // the usual append: nothing to decode twice
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return raw, nil, nil // not an array: the parser says what is wrong
	}
	var ids []string
	for i, e := range elems {
		var ref map[string]json.RawMessage
		if json.Unmarshal(e, &ref) != nil || len(ref) != 1 || ref["upload_id"] == nil {
			continue
		}
		var id string
		if err := json.Unmarshal(ref["upload_id"], &id); err != nil || id == "" {
			return nil, nil, fmt.Errorf("%w: message %d: upload_id must be a string", session.ErrInvalid, i)
		}
		var data []byte
		err := s.retry(ctx, func() (err error) {
			data, err = s.store.UploadParts(ctx, sid, id)
			return err
		})
		if err != nil {
			if errors.Is(err, session.ErrNotFound) {
				err = fmt.Errorf("%w: message %d: %v", session.ErrInvalid, i, err)
			}
			return nil, nil, err
		}
		if !json.Valid(data) {
			return nil, nil, fmt.Errorf("%w: message %d: upload %q is not one JSON message", session.ErrInvalid, i, id)
		}
		elems[i] = data
		ids = append(ids, id)
	}
	if ids == nil {
		return raw, nil, nil
	}
	out, err := json.Marshal(elems)
	return out, ids, err
}

// DropUploads removes uploads an append has used (best effort: a session's
// delete or sweep removes what is left).
func (s *Service) DropUploads(ctx context.Context, sid string, ids []string) {
	for _, id := range ids {
		_ = s.store.DeleteUpload(ctx, sid, id)
	}
}

// MessagePart returns part (0-based) of the stored message seq, cut in
// parts of MaxUploadPartBytes.
func (s *Service) MessagePart(ctx context.Context, sid string, seq int64, part int) (contract.MessagePart, error) {
	m, err := s.Message(ctx, sid, seq)
	if err != nil {
		return contract.MessagePart{}, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return contract.MessagePart{}, err
	}
	p, err := Cut(b, part, contract.MaxUploadPartBytes, "")
	if err != nil {
		return contract.MessagePart{}, fmt.Errorf("message %d: %w", seq, err)
	}
	return contract.MessagePart{SessionID: sid, Seq: seq, Part: p.Part, Parts: p.Parts, Data: p.Data}, nil
}

// ErrChanged is returned for a part of an answer read in parts when the
// answer has changed since the first part was read (the session was
// written meanwhile): read it again from part 0.
var ErrChanged = errors.New("the answer changed while it was read in parts: read it again from part 0")

// PartsOf is how many parts of size bytes whole is cut in.
func PartsOf(whole []byte, size int) int { return max(1, (len(whole)+size-1)/size) }

// Cut returns part (0-based) of whole cut in parts of size bytes. With
// digest set, whole must still be the answer digest names, else it
// returns ErrChanged; a part out of range is session.ErrInvalid.
func Cut(whole []byte, part, size int, digest string) (contract.AnswerPart, error) {
	d := contract.Digest(whole)
	if digest != "" && digest != d {
		return contract.AnswerPart{}, ErrChanged
	}
	parts := PartsOf(whole, size)
	if part < 0 || part >= parts {
		return contract.AnswerPart{}, fmt.Errorf("%w: part %d: the answer has parts 0..%d", session.ErrInvalid, part, parts-1)
	}
	return contract.AnswerPart{Part: part, Parts: parts, Digest: d, Data: whole[part*size : min(len(whole), (part+1)*size)]}, nil
}
