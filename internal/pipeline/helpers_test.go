package pipeline_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// dataDir is ../shared/data seen from this package.
var dataDir = filepath.Join("..", "..", "..", "shared", "data")

func needData(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(dataDir); err != nil {
		t.Skipf("skipping: %s is absent (the shared test data is not beside this checkout)", dataDir)
	}
	return dataDir
}

func counter(t testing.TB) *tokens.Counter {
	t.Helper()
	c, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type env struct {
	store    *memstore.Store
	breakers *memstore.Breakers
	svc      *pipeline.Service
	counter  *tokens.Counter
}

func newEnv(t testing.TB, sum pipeline.Summarizer, cfg pipeline.Config) *env {
	t.Helper()
	c := counter(t)
	if sum == nil {
		sum = extractive.New(c)
	}
	e := &env{store: memstore.New(), breakers: memstore.NewBreakers(), counter: c}
	svc, err := pipeline.New(e.store, e.breakers, sum, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// importSession stores msgs as a new session, counted with the env's counter.
func (e *env) importSession(t testing.TB, id string, limit int, msgs []session.Message) {
	t.Helper()
	cp := make([]session.Message, len(msgs))
	copy(cp, msgs)
	for i := range cp {
		e.counter.Ensure(&cp[i])
	}
	if _, err := e.store.Create(context.Background(), session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: limit}, cp); err != nil {
		t.Fatal(err)
	}
}

func (e *env) context(t testing.TB, id string) []session.Message {
	t.Helper()
	s, err := e.store.Load(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	return pipeline.ContextOf(s)
}

// crashStore fails the first Commit after writing only its compaction
// message, as a process killed between the two writes would; the message is
// then visible through Compaction, as in the KV store.
type crashStore struct {
	*memstore.Store
	mu      sync.Mutex
	crashed bool
	written map[string]session.Message
}

func (c *crashStore) Commit(ctx context.Context, cm session.Commit) (bool, error) {
	c.mu.Lock()
	if !c.crashed {
		c.crashed = true
		c.written = map[string]session.Message{cm.Compaction.ID: cm.Compaction}
		c.mu.Unlock()
		return false, errors.New("connection reset")
	}
	c.mu.Unlock()
	return c.Store.Commit(ctx, cm)
}

func (c *crashStore) Compaction(ctx context.Context, sessionID, id string) (*session.Message, error) {
	c.mu.Lock()
	m, ok := c.written[id]
	c.mu.Unlock()
	if ok {
		return &m, nil
	}
	return c.Store.Compaction(ctx, sessionID, id)
}

// overtakenStore commits the first Commit and then answers it with
// session.ErrConflict, as the KV store answers a request whose compaction
// message it wrote while another request, racing with the same plan, moved
// the record to that message first.
type overtakenStore struct {
	*memstore.Store
	once sync.Once
}

func (o *overtakenStore) Commit(ctx context.Context, cm session.Commit) (bool, error) {
	overtaken := false
	o.once.Do(func() { overtaken = true })
	existed, err := o.Store.Commit(ctx, cm)
	if overtaken && err == nil {
		return existed, session.ErrConflict
	}
	return existed, err
}
