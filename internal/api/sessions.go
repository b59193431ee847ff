package api

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// Imported is what creating a session answers.
type Imported struct {
	SessionID    string `json:"session_id"`
	Model        string `json:"model"`
	ContextLimit int    `json:"context_limit"`
	Messages     int    `json:"messages"`
	Tokens       int    `json:"tokens"`
}

// ContextView is what the model sees now: pinned messages, the summary and
// the raw tail, with their token count.
type ContextView struct {
	SessionID    string            `json:"session_id"`
	Model        string            `json:"model"`
	ContextLimit int               `json:"context_limit"`
	Tokens       int               `json:"tokens"`
	CompactionID string            `json:"compaction_id,omitempty"`
	Messages     []session.Message `json:"messages"`
}

func counterFor(table *models.Table, model string) (*tokens.Counter, error) {
	return tokens.ForEncoding(table.Lookup(model).Encoding)
}

// limitOf is a session's context limit: its own, else its model's window.
func limitOf(table *models.Table, rec session.Record) int {
	if rec.ContextLimit > 0 {
		return rec.ContextLimit
	}
	return table.Lookup(rec.Model).ContextWindow
}

// CreateSession stores a new session with msgs, each counted with the
// model's encoding (an empty id gets a new UUID; an empty model "gpt-4o").
// It returns session.ErrExists for a taken id and session.ErrInvalid for a
// bad id or message.
func CreateSession(ctx context.Context, store *kvstore.Sessions, table *models.Table, rec session.Record, msgs []session.Message) (Imported, error) {
	if rec.SessionID == "" {
		rec.SessionID = uuid.NewString()
	}
	if rec.Model == "" {
		rec.Model = "gpt-4o"
	}
	if rec.ContextLimit < 0 {
		return Imported{}, fmt.Errorf("%w: context_limit must be >= 0", session.ErrInvalid)
	}
	c, err := counterFor(table, rec.Model)
	if err != nil {
		return Imported{}, err
	}
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	total := c.Context(msgs) // as the context is counted: with the reply priming
	if _, err := store.Create(ctx, rec, msgs); err != nil {
		return Imported{}, err
	}
	return Imported{SessionID: rec.SessionID, Model: rec.Model, ContextLimit: limitOf(table, rec), Messages: len(msgs), Tokens: total}, nil
}

// AppendMessages adds msgs at the session's head, counted with the session
// model's encoding, and returns them as stored (with ids and seqs).
func AppendMessages(ctx context.Context, store *kvstore.Sessions, table *models.Table, sid string, msgs []session.Message) ([]session.Message, error) {
	rec, err := store.Record(ctx, sid)
	if err != nil {
		return nil, err
	}
	c, err := counterFor(table, rec.Model)
	if err != nil {
		return nil, err
	}
	for i := range msgs {
		msgs[i].Tokens = 0 // counted here, never trusted from the caller
		c.Ensure(&msgs[i])
	}
	return store.Append(ctx, sid, msgs...)
}

// Context returns what the model sees now for the session.
func Context(ctx context.Context, store pipeline.SessionStore, table *models.Table, sid string) (ContextView, error) {
	sess, err := store.Load(ctx, sid, false)
	if err != nil {
		return ContextView{}, err
	}
	c, err := counterFor(table, sess.Record.Model)
	if err != nil {
		return ContextView{}, err
	}
	msgs := pipeline.ContextOf(sess)
	return ContextView{SessionID: sid, Model: sess.Record.Model, ContextLimit: limitOf(table, sess.Record), Tokens: c.Context(msgs),
		CompactionID: sess.Record.CompactionID, Messages: msgs}, nil
}
