package session

import (
	"fmt"
	"strings"
	"time"
)

// Page sizes of a list: DefaultPageSize when the caller names none, at
// most MaxPageSize.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// ListOptions select a page of sessions. A store reads its sessions in the
// order it keeps them, a page at a time: Next of one page is After of the
// next, and a session written to while a list pages through the store may
// be listed twice, never skipped unless it was deleted.
type ListOptions struct {
	// After is the cursor a previous page answered ("" for the first).
	After string
	// Limit is the page's size (0: DefaultPageSize; at most MaxPageSize).
	Limit int
	// Prefix keeps the sessions whose id starts with it.
	Prefix string
	// Model keeps the sessions of this model.
	Model string
	// IdleFor keeps the sessions nobody wrote to for at least this long.
	IdleFor time.Duration
	// Compacted keeps the sessions compacted at least once (true) or
	// never (false); nil keeps both.
	Compacted *bool
}

// Check normalises the page size and refuses what cannot be listed.
func (o *ListOptions) Check() error {
	switch {
	case o.Limit < 0:
		return fmt.Errorf("%w: limit %d: a page holds 1 to %d sessions", ErrInvalid, o.Limit, MaxPageSize)
	case o.Limit == 0:
		o.Limit = DefaultPageSize
	case o.Limit > MaxPageSize:
		return fmt.Errorf("%w: limit %d: a page holds at most %d sessions", ErrInvalid, o.Limit, MaxPageSize)
	}
	if o.IdleFor < 0 {
		return fmt.Errorf("%w: idle_for %s is negative", ErrInvalid, o.IdleFor)
	}
	return nil
}

// Keep reports whether a session passes the filters at now.
func (o *ListOptions) Keep(s Listed, now time.Time) bool {
	switch {
	case !strings.HasPrefix(s.SessionID, o.Prefix):
		return false
	case o.Model != "" && s.Model != o.Model:
		return false
	case o.IdleFor > 0 && now.Sub(s.UpdatedAt) < o.IdleFor:
		return false
	case o.Compacted != nil && (s.Compactions > 0) != *o.Compacted:
		return false
	}
	return true
}

// Listed is what a list says of one session.
type Listed struct {
	SessionID    string    `json:"session_id"`
	Model        string    `json:"model,omitempty"`
	ContextLimit int       `json:"context_limit,omitempty"`
	Messages     int64     `json:"messages"`
	Compactions  int       `json:"compactions"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// ListedOf is what a list says of a record.
func ListedOf(r Record) Listed {
	return Listed{SessionID: r.SessionID, Model: r.Model, ContextLimit: r.ContextLimit, Messages: r.HeadSeq,
		Compactions: r.Compactions, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// SessionPage is one page of a session list.
type SessionPage struct {
	Sessions []Listed `json:"sessions"`
	// Next is the cursor of the next page ("" on the last).
	Next string `json:"next,omitempty"`
}

// BreakerPage is one page of a breaker list, in the order the store keeps
// them.
type BreakerPage struct {
	Breakers []Breaker `json:"breakers"`
	Next     string    `json:"next,omitempty"`
}

// TenantUsage is what the store holds for one tenant: its sessions and
// the messages and compactions their records count (a record may be a
// checkpoint behind its session's head: see the store), and when one was
// last written.
type TenantUsage struct {
	Tenant   string `json:"tenant"`
	Sessions int    `json:"sessions"`
	Messages int64  `json:"messages"`
	// Bytes is what their messages say (Record.Bytes).
	Bytes       int64     `json:"bytes"`
	Compactions int       `json:"compactions"`
	UpdatedAt   time.Time `json:"updated_at"`
	// BreakersOpen is filled by a caller that reads the breakers too.
	BreakersOpen *int `json:"breakers_open,omitempty"`
}
