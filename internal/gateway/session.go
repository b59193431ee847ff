package gateway

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/wire"
)

// state is what a gateway knows of one session: where its head is, the
// compaction in force as items, and its messages' token counts. A gateway
// that knows nothing (a restart, another replica's session) reads it
// again from the service; one that knows wrong finds out when an append
// at its head is refused.
type state struct {
	mu sync.Mutex
	// key is the state's in states: its tenant's and session's.
	key    string
	sid    string
	known  bool
	head   int
	lastID string
	view   *view
	tokens map[string]int
	// overhead counts the last request's system and tools, by digest.
	overheadKey [32]byte
	overhead    int
	// hinted is the compaction in force when the session's
	// ContextNearBudget was sent.
	hinted string
	// forks are the sessions this one's conversation branched into.
	forks []fork
}

// fork: a conversation whose message at index at is id went on in sid.
type fork struct {
	at  int
	id  string
	sid string
}

// view is the compaction in force, as items over the conversation's
// messages (message i is the session's seq i+1).
type view struct {
	compaction string
	head       int
	items      []item
}

// states keeps the states of the sessions seen last, within a count.
type states struct {
	mu    sync.Mutex
	max   int
	order *list.List
	byKey map[string]*list.Element
}

func newStates(max int) *states {
	return &states{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

// get returns the state of a tenant's session, made when unknown.
func (s *states) get(tenant, sid string) *state {
	key := tenant + "\x00" + sid
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		s.order.MoveToFront(e)
		return e.Value.(*state)
	}
	st := &state{key: key, sid: sid, tokens: map[string]int{}}
	s.byKey[key] = s.order.PushFront(st)
	for s.order.Len() > s.max {
		last := s.order.Back()
		s.order.Remove(last)
		delete(s.byKey, last.Value.(*state).key)
	}
	return st
}

// sessionID derives a conversation's session: from the runtime's key for
// it (if any) and its first message, which two conversations of one key
// rarely share (and when they do, the second forks at its first
// difference).
func sessionID(key string, c *conv) string {
	h := sha256.New()
	h.Write([]byte(c.api.provider))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(c.ids[0]))
	return "gw-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// forkID is the session a conversation goes on in after it left sid at
// the message whose chain id is id.
func forkID(sid, id string) string {
	sum := sha256.Sum256([]byte(sid + "\x00" + id))
	return "gw-" + hex.EncodeToString(sum[:16])
}

// errBehind: the request holds less than the session (an older turn sent
// again, or a side request that shares its start): it goes upstream as it
// is.
var errBehind = errors.New("the request holds less than its session")

// syncer stores a conversation's messages in its session.
type syncer struct {
	c       *client.Client
	limit   int
	model   string
	counter *tokens.Counter
}

// sync makes the session hold exactly the request's messages (appending
// those it lacks, idempotently) and returns the state of the session that
// does: st's, or a fork's when the conversation left it.
func (g *Gateway) sync(ctx context.Context, sy syncer, tenant string, st *state, c *conv) (*state, error) {
	for range 8 {
		n := len(c.msgs)
		if f, ok := st.forkFor(c); ok {
			next := g.states.get(tenant, f)
			st.mu.Unlock()
			next.mu.Lock()
			st = next
			continue
		}
		if !st.known {
			if err := st.load(ctx, sy, c); err != nil {
				return st, err
			}
		}
		switch {
		case st.head > n || st.head > 0 && c.ids[st.head-1] != st.lastID:
			at, err := st.divergence(ctx, sy, c)
			if errors.Is(err, errBehind) || err != nil {
				return st, err
			}
			st.forks = append(st.forks, fork{at: at, id: c.ids[at], sid: forkID(st.sid, c.ids[at])})
			continue
		case st.head == n:
			return st, nil
		}
		_, err := sy.c.Append(ctx, st.sid, c.msgs[st.head:], client.ExpectHead(int64(st.head)))
		if errors.Is(err, client.ErrConflict) {
			st.known = false // another replica (or a retry) appended: read it again
			continue
		}
		if err != nil {
			return st, err
		}
		st.head, st.lastID = n, c.ids[n-1]
		return st, nil
	}
	return st, fmt.Errorf("session %s: its head kept moving", st.sid)
}

// extends reports whether the request is the session as the gateway knows
// it, and more: what is new only needs appending.
func (st *state) extends(c *conv) bool {
	n := len(c.msgs)
	if !st.known || st.head == 0 || st.head >= n || c.ids[st.head-1] != st.lastID {
		return false
	}
	_, forked := st.forkFor(c)
	return !forked
}

// appendNew appends the request's messages after the head it knows; a
// refusal leaves the state unknown, so the next call reads it again (and
// appends what is still missing).
func (st *state) appendNew(ctx context.Context, sy syncer, c *conv) error {
	n := len(c.msgs)
	if _, err := sy.c.Append(ctx, st.sid, c.msgs[st.head:], client.ExpectHead(int64(st.head))); err != nil {
		st.known = false
		return err
	}
	st.head, st.lastID = n, c.ids[n-1]
	return nil
}

// forkFor returns the fork the conversation went on in, if any.
func (st *state) forkFor(c *conv) (string, bool) {
	for _, f := range st.forks {
		if f.at < len(c.ids) && c.ids[f.at] == f.id {
			return f.sid, true
		}
	}
	return "", false
}

// load reads where the session's head is, and its compaction in force;
// a session that does not exist is created with the request's messages.
func (st *state) load(ctx context.Context, sy syncer, c *conv) error {
	v, err := sy.c.Context(ctx, st.sid)
	if errors.Is(err, client.ErrNotFound) {
		_, err = sy.c.Create(ctx, st.sid, client.NewSession{Model: sy.model, ContextLimit: sy.limit, Messages: c.msgs})
		if errors.Is(err, client.ErrConflict) {
			return st.load(ctx, sy, c) // created meanwhile, with other messages
		}
		if err != nil {
			return err
		}
		st.known, st.head, st.lastID, st.view = true, len(c.msgs), c.ids[len(c.ids)-1], nil
		return nil
	}
	if err != nil {
		return err
	}
	st.known, st.head = true, int(v.HeadSeq)
	st.lastID = ""
	for _, m := range v.Messages {
		if m.Seq == v.HeadSeq && !m.IsCompaction {
			st.lastID = m.ID
		}
	}
	if st.lastID == "" && st.head > 0 {
		m, err := sy.c.Message(ctx, st.sid, v.HeadSeq)
		if err != nil {
			return err
		}
		st.lastID = m.ID
	}
	st.setView(v)
	return nil
}

// setView keeps the context's compaction in force as items (none when
// nothing is compacted). A tool result whose text the context shows
// otherwise is cleared (a compaction that only clears has no summary, nor
// a message that lists them): its placeholder is what the context shows.
func (st *state) setView(v client.ContextView) {
	if v.CompactionID == "" {
		st.view = nil
		return
	}
	vw := &view{compaction: v.CompactionID, head: int(v.HeadSeq)}
	for _, m := range v.Messages {
		switch {
		case m.IsCompaction:
			vw.items = append(vw.items, item{summary: m.Content.Text})
		case m.Seq > 0:
			it := item{msg: int(m.Seq) - 1}
			if m.Role == client.Tool {
				it.placeholder = m.Content.Text
			}
			vw.items = append(vw.items, it)
		}
	}
	st.view = vw
}

// divergence finds the first message of the request the session holds
// otherwise (the ids name whole prefixes, so a binary search over the
// session's messages finds it).
func (st *state) divergence(ctx context.Context, sy syncer, c *conv) (int, error) {
	n := min(st.head, len(c.ids))
	var ferr error
	at := sort.Search(n, func(i int) bool {
		if ferr != nil {
			return true
		}
		m, err := sy.c.Message(ctx, st.sid, int64(i+1))
		if err != nil {
			ferr = err
			return true
		}
		return m.ID != c.ids[i]
	})
	if ferr != nil {
		return 0, ferr
	}
	if at == n && st.head > len(c.ids) {
		return 0, errBehind
	}
	return at, nil
}

// count is a message's tokens, counted once.
func (st *state) count(sy syncer, c *conv, i int) int {
	id := c.ids[i]
	if n, ok := st.tokens[id]; ok {
		return n
	}
	m, err := wire.Convert[session.Message](c.msgs[i])
	n := 0
	if err == nil {
		n = sy.counter.Message(&m)
	}
	st.tokens[id] = n
	return n
}

// checkSessionHeader reads a runtime's explicit session id.
func checkSessionHeader(v string) error { return contract.CheckSessionID(v) }
