package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/contract"
)

// Error is an endpoint's error answer.
type Error struct {
	// Subject is the endpoint's.
	Subject string
	// Code is HTTP-like: 400 bad input, 404 no such session, 409 a taken
	// id or a moved head, 413 an answer too large, 507 the store full,
	// 503 retry, 500.
	Code int
	// Status says what happened to the request: "not_applied" (nothing
	// was written, and the same request will be refused again), "retry"
	// (send the same request again, it is safe) or "failed".
	Status  string
	Message string
	// HeadSeq is the session's head when an append's expected head did not
	// hold.
	HeadSeq *int64
	// Quota, on a 429, is the tenant's quota the request is over
	// (writes_per_second, concurrent_writes, sessions, bytes_stored, ...);
	// RetryAfter, when it has room again (0: not before usage is freed).
	Quota      string
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %d %s", e.Subject, e.Code, e.Message)
}

// Retryable reports whether the same request may succeed when repeated.
func (e *Error) Retryable() bool { return e.Status == string(contract.StatusRetry) || e.Code == 503 }

// Is makes errors.Is(err, ErrNotFound), errors.Is(err, ErrConflict),
// errors.Is(err, ErrStorageFull) and errors.Is(err, ErrQuotaExceeded) work
// on an Error.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.Code == 404 || target == ErrConflict && e.Code == 409 || target == ErrStorageFull && e.Code == 507 ||
		target == ErrQuotaExceeded && e.Quota != ""
}

// Errors to test with errors.Is.
var (
	// ErrNotFound: the session does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the session exists with other content, or an append's
	// expected head moved.
	ErrConflict = errors.New("conflict")
	// ErrStorageFull: the store has no room for the write (nothing was
	// written); the same request passes once space is freed (sessions
	// deleted, the server's store raised).
	ErrStorageFull = errors.New("the store is full")
	// ErrNoService: no compactor answers on the endpoint's subject.
	ErrNoService = errors.New("no compactor service answers (is `compactor serve` running against this NATS server?)")
)

// call makes one endpoint request with a JSON body and decodes the answer
// into out.
func (c *Client) call(ctx context.Context, subject string, body, out any) error {
	var b []byte
	if raw, ok := body.(rawBody); ok {
		b = raw
	} else {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fmt.Errorf("client: %s: %w", subject, err)
		}
	}
	if room := c.nc.MaxPayload(); int64(len(b)) > room {
		return fmt.Errorf("client: %s: a request of %d bytes is over the server's max_payload (%d)", subject, len(b), room)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, subject, b)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("client: %s: %w", subject, ErrNoService)
	}
	if err != nil {
		return fmt.Errorf("client: %s: %w", subject, err)
	}
	if code := m.Header.Get(contract.HeaderErrorCode); code != "" {
		e := &Error{Subject: subject, Message: m.Header.Get(contract.HeaderError)}
		e.Code, _ = strconv.Atoi(code)
		var eb contract.ErrorBody
		if json.Unmarshal(m.Data, &eb) == nil {
			e.Status, e.HeadSeq = string(eb.Status), eb.HeadSeq
			e.Quota, e.RetryAfter = eb.Quota, time.Duration(eb.RetryAfterMS)*time.Millisecond
			if eb.Error != "" {
				e.Message = eb.Error
			}
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("client: %s answered %.200q: %w", subject, m.Data, err)
	}
	return nil
}

// NewSession is what a session starts with.
type NewSession struct {
	// Model is the session's model: its token encoding and default window
	// (default gpt-4o).
	Model string `json:"model,omitempty"`
	// ContextLimit is the session's window in tokens (default: the
	// model's).
	ContextLimit int `json:"context_limit,omitempty"`
	// Messages are the session's first messages (may be empty). Give
	// them ids: a create repeated with the same content is applied once.
	Messages []Message `json:"messages"`
}

type createBody struct {
	SessionID string `json:"session_id,omitempty"`
	NewSession
}

// Create stores a new session under sessionID ("": the service makes a
// UUID, which Created names). The same create again answers the session;
// another create on a taken id is an error matching ErrConflict.
func (c *Client) Create(ctx context.Context, sessionID string, s NewSession) (Created, error) {
	if sessionID != "" {
		if err := checkSession(sessionID); err != nil {
			return Created{}, err
		}
	}
	if s.ContextLimit < 0 {
		return Created{}, fmt.Errorf("client: context limit %d must be >= 0", s.ContextLimit)
	}
	if s.Messages == nil {
		s.Messages = []Message{}
	}
	var out Created
	return out, c.call(ctx, contract.SubjectCreate, createBody{SessionID: sessionID, NewSession: s}, &out)
}

// AppendOption configures one Append.
type AppendOption func(*appendBody)

// ExpectHead applies the append only if the session's last seq is seq;
// otherwise the error matches ErrConflict and holds the head.
func ExpectHead(seq int64) AppendOption {
	return func(b *appendBody) { b.ExpectedHeadSeq = &seq }
}

type appendBody struct {
	SessionID       string            `json:"session_id"`
	Messages        []json.RawMessage `json:"messages"`
	ExpectedHeadSeq *int64            `json:"expected_head_seq,omitempty"`
}

// rawBody is a request body encoded already: call sends it as it is.
type rawBody []byte

// marshal is b's JSON, as json.Marshal writes it, written around the
// messages' own JSON: json.Marshal would scan each message again (issue
// 43).
func (b *appendBody) marshal() rawBody {
	n := 64 + len(b.SessionID)
	for _, m := range b.Messages {
		n += len(m) + 1
	}
	out := make([]byte, 0, n)
	sid, _ := json.Marshal(b.SessionID)
	out = append(append(out, `{"session_id":`...), sid...)
	out = append(out, `,"messages":[`...)
	for i, m := range b.Messages {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	out = append(out, ']')
	if b.ExpectedHeadSeq != nil {
		out = strconv.AppendInt(append(out, `,"expected_head_seq":`...), *b.ExpectedHeadSeq, 10)
	}
	return append(out, '}')
}

// Append adds messages to a session. A message whose id is stored already
// is not written again (the answer says so): an append is safe to repeat.
// Messages too large for one request (over the server's max_payload) are
// uploaded in parts first, and appended with the others atomically.
func (c *Client) Append(ctx context.Context, sessionID string, msgs []Message, opts ...AppendOption) (Appended, error) {
	if err := checkSession(sessionID); err != nil {
		return Appended{}, err
	}
	if len(msgs) == 0 {
		return Appended{}, errors.New("client: append needs at least one message")
	}
	b := appendBody{SessionID: sessionID}
	for _, o := range opts {
		o(&b)
	}
	size := 256 // the body's fields and framing
	for _, m := range msgs {
		raw, err := json.Marshal(m)
		if err != nil {
			return Appended{}, fmt.Errorf("client: message %q: %w", m.ID, err)
		}
		b.Messages = append(b.Messages, raw)
		size += len(raw) + 1
	}
	// Upload the largest messages until the append fits one request.
	room := int(c.nc.MaxPayload()) - 1024
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return len(b.Messages[order[x]]) > len(b.Messages[order[y]]) })
	for _, i := range order {
		if size <= room {
			break
		}
		ref, err := c.upload(ctx, sessionID, b.Messages[i])
		if err != nil {
			return Appended{}, err
		}
		size += len(ref) - len(b.Messages[i])
		b.Messages[i] = ref
	}
	if size > room {
		return Appended{}, fmt.Errorf("client: %d messages do not fit one append even uploaded one by one: append fewer at once", len(msgs))
	}
	var out Appended
	return out, c.call(ctx, contract.SubjectAppend, b.marshal(), &out)
}

// upload stores a message's JSON in parts and returns the reference to
// append in its place. Its id is derived from the content, so a repeated
// append uploads to the same parts.
func (c *Client) upload(ctx context.Context, sid string, raw []byte) (json.RawMessage, error) {
	sum := sha256.Sum256(raw)
	id := "c-" + hex.EncodeToString(sum[:16])
	// A part is base64 in a JSON body: it must fit max_payload.
	part := min(contract.MaxUploadPartBytes, (int(c.nc.MaxPayload())-1024)*3/4)
	parts := (len(raw) + part - 1) / part
	if parts > contract.MaxUploadParts {
		return nil, fmt.Errorf("client: a message of %d bytes is over what the service stores (%d parts of %d bytes)", len(raw), contract.MaxUploadParts, part)
	}
	for p := range parts {
		data := raw[p*part : min(len(raw), (p+1)*part)]
		body := contract.UploadBody{SessionID: sid, UploadID: id, Part: p, Parts: parts, Data: data}
		if err := c.call(ctx, contract.SubjectUpload, body, nil); err != nil {
			return nil, err
		}
	}
	return json.Marshal(map[string]string{"upload_id": id})
}

type sessionRef struct {
	SessionID string `json:"session_id"`
}

// Context returns what to send to the model now: the latest summary, then
// every message after it. A context over one NATS message (screenshots,
// long logs) is read in parts and assembled.
func (c *Client) Context(ctx context.Context, sessionID string) (ContextView, error) {
	var out ContextView
	return out, c.read(ctx, contract.SubjectContext, sessionID, &out)
}

// History returns a session's record, every message (summarised ones
// marked) and every compaction, read in parts when it is over one NATS
// message.
func (c *Client) History(ctx context.Context, sessionID string) (History, error) {
	var out History
	return out, c.read(ctx, contract.SubjectHistory, sessionID, &out)
}

// read asks a read endpoint that may answer in parts (session.context,
// session.history): an answer over one message (413) is read part by part,
// each naming the first part's digest, checked and decoded. A session
// written while it is read changes the answer: the reading starts again,
// a few times at most.
func (c *Client) read(ctx context.Context, subject, sessionID string, out any) error {
	if err := checkSession(sessionID); err != nil {
		return err
	}
	err := c.call(ctx, subject, sessionRef{sessionID}, out)
	var e *Error
	if !errors.As(err, &e) || e.Code != 413 {
		return err
	}
	for try := 0; ; try++ {
		whole, err := c.readParts(ctx, subject, sessionID)
		if errors.Is(err, ErrConflict) && try < 4 {
			continue // written meanwhile: read the new answer
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(whole, out); err != nil {
			return fmt.Errorf("client: %s of %s, read in parts: %w", subject, sessionID, err)
		}
		return nil
	}
}

// readParts reads every part of one answer and checks the whole against
// its digest.
func (c *Client) readParts(ctx context.Context, subject, sessionID string) ([]byte, error) {
	var whole []byte
	digest := ""
	for p, parts := 0, 1; p < parts; p++ {
		var ap contract.AnswerPart
		if err := c.call(ctx, subject, contract.PagedBody{SessionID: sessionID, Part: &p, Digest: digest}, &ap); err != nil {
			return nil, err
		}
		parts, digest = ap.Parts, ap.Digest
		whole = append(whole, ap.Data...)
	}
	if contract.Digest(whole) != digest {
		return nil, fmt.Errorf("client: %s of %s: the parts do not match their digest", subject, sessionID)
	}
	return whole, nil
}

// Message returns one stored message by its seq, summarised or not: the
// original of what a compaction replaced. A message too large for one
// answer is read in parts.
func (c *Client) Message(ctx context.Context, sessionID string, seq int64) (Message, error) {
	if err := checkSession(sessionID); err != nil {
		return Message{}, err
	}
	if seq < 1 {
		return Message{}, fmt.Errorf("client: seq %d must be >= 1", seq)
	}
	type ref struct {
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
		Part      *int   `json:"part,omitempty"`
	}
	var m Message
	err := c.call(ctx, contract.SubjectMessage, ref{sessionID, seq, nil}, &m)
	var e *Error
	if !errors.As(err, &e) || e.Code != 413 {
		return m, err
	}
	var whole []byte
	for p, parts := 0, 1; p < parts; p++ {
		var mp contract.MessagePart
		if err := c.call(ctx, contract.SubjectMessage, ref{sessionID, seq, &p}, &mp); err != nil {
			return Message{}, err
		}
		parts = mp.Parts
		whole = append(whole, mp.Data...)
	}
	if err := json.Unmarshal(whole, &m); err != nil {
		return Message{}, fmt.Errorf("client: message %d of %s: %w", seq, sessionID, err)
	}
	return m, nil
}

// Delete removes a session: its messages, compactions and breaker.
// Deleting one that does not exist answers the same.
func (c *Client) Delete(ctx context.Context, sessionID string) (Deleted, error) {
	if err := checkSession(sessionID); err != nil {
		return Deleted{}, err
	}
	var out Deleted
	return out, c.call(ctx, contract.SubjectDelete, sessionRef{sessionID}, &out)
}

// Breaker returns a session's circuit breaker (closed with no failures when
// the session never failed).
func (c *Client) Breaker(ctx context.Context, sessionID string) (Breaker, error) {
	if err := checkSession(sessionID); err != nil {
		return Breaker{}, err
	}
	var out Breaker
	return out, c.call(ctx, contract.SubjectBreaker, sessionRef{sessionID}, &out)
}
