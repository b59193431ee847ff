package schemas_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/schemas"
)

// Real results and stored values validate against their schemas; broken
// ones do not.
func TestRealValuesValidate(t *testing.T) {
	ctx := context.Background()
	c, _ := tokens.ForEncoding("o200k_base")
	store, breakers := memstore.New(), memstore.NewBreakers()
	svc, _ := pipeline.New(store, breakers, extractive.New(c), pipeline.DefaultConfig())
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("policy")}}
	for i := range 40 {
		msgs = append(msgs,
			session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("check booking BK%03d", i))},
			session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: fmt.Sprint("c", i), Type: "function", Function: session.FunctionCall{Name: "get", Arguments: "{}"}}}},
			session.Message{Role: session.RoleTool, ToolCallID: fmt.Sprint("c", i), Content: session.TextContent(fmt.Sprintf(`{"booking":"BK%03d","price":%d}`, i, i))})
	}
	for i := range msgs {
		c.Ensure(&msgs[i])
	}
	store.Create(ctx, session.Record{SessionID: "s-1", Model: "gpt-4o", ContextLimit: 2000}, msgs)
	res, err := svc.Compact(ctx, pipeline.Request{ID: "r1", SessionID: "s-1", Trigger: pipeline.TriggerOverBudget})
	if err != nil {
		t.Fatal(err)
	}
	mustValidate(t, schemas.CompactionCompleted, res)
	// A request that told its cache: the result says how it was judged.
	now := time.Now()
	store.Create(ctx, session.Record{SessionID: "s-cache", Model: "gpt-4o", ContextLimit: 2000}, msgs)
	cached, err := svc.Compact(ctx, pipeline.Request{ID: "r-cache", SessionID: "s-cache", Trigger: pipeline.TriggerOverBudget, At: now,
		Cache: &pipeline.CacheState{LastRequest: now.Add(-time.Hour), TTL: 5 * time.Minute}})
	if err != nil || cached.CacheState != pipeline.CacheCold {
		t.Fatalf("%+v %v", cached, err)
	}
	mustValidate(t, schemas.CompactionCompleted, cached)
	failed, _ := svc.Compact(ctx, pipeline.Request{ID: "r2", SessionID: "nope", Trigger: pipeline.TriggerOverflow})
	mustValidate(t, schemas.CompactionFailed, events.FailedData(failed))
	// A summariser that always fails opens the breaker: its event data.
	every := pipeline.DefaultConfig()
	every.BreakerCooldown = 0 // each failure counts, not one per outage
	bad, _ := pipeline.New(store, breakers, failing{}, every)
	store.Create(ctx, session.Record{SessionID: "s-2", Model: "gpt-4o", ContextLimit: 2000}, msgs)
	var opened *pipeline.Result
	for i := range 3 {
		r, _ := bad.Compact(ctx, pipeline.Request{ID: fmt.Sprint("b", i), SessionID: "s-2", Trigger: pipeline.TriggerOverBudget})
		if r.CircuitOpened {
			opened = r
		}
	}
	if opened == nil {
		t.Fatal("breaker did not open")
	}
	mustValidate(t, schemas.CompactionCircuitOpened, events.CircuitOpenedData(opened))
	mustValidate(t, schemas.CompactionCircuitClosed, events.CircuitClosed{SessionID: "s-2", Failures: 3, ClosedAt: opened.Breaker.UpdatedAt, By: "operator"})
	rec, _ := store.Record(ctx, "s-1")
	mustValidate(t, schemas.SessionRecord, rec)
	all, comps, _ := store.History(ctx, "s-1")
	for _, m := range append(all[:5], comps...) {
		mustValidate(t, schemas.Message, m)
	}
	mustValidate(t, schemas.ContextRequest, map[string]any{"session_id": "s-1", "model": "gpt-4o", "context_limit": 8000, "requested_tokens": 9100, "message_count": 80})

	for name, doc := range map[string]string{
		schemas.ContextRequest:      `{"model": "gpt-4o"}`,
		schemas.CompactionCompleted: `{"session_id": "s"}`,
		schemas.Message:             `{"id": "x", "seq": 1, "role": "robot"}`,
		schemas.SessionRecord:       `{"session_id": "a.b", "head_seq": 1, "created_at": "x", "updated_at": "y"}`,
	} {
		if err := schemas.Validate(name, []byte(doc)); err == nil {
			t.Errorf("%s accepted %s", name, doc)
		}
	}
	if err := schemas.Validate(schemas.ContextRequest, []byte("{")); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("malformed JSON: %v", err)
	}
}

func mustValidate(t *testing.T, name string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := schemas.Validate(name, b); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, b)
	}
}

type failing struct{}

func (failing) Summarize(context.Context, pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	return pipeline.SummaryResponse{}, errors.New("upstream 503")
}

// The schemas' session-id pattern is the contract's, wherever a schema
// declares session_id.
func TestSessionIDPatternIsTheContracts(t *testing.T) {
	for _, name := range []string{schemas.ContextRequest, schemas.SessionRecord} {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		var patterns []string
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if sid, ok := v["session_id"].(map[string]any); ok {
					p, _ := sid["pattern"].(string)
					patterns = append(patterns, p)
				}
				for _, e := range v {
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(doc)
		if len(patterns) == 0 {
			t.Errorf("%s declares no session_id", name)
		}
		for _, got := range patterns {
			if got != contract.SessionIDPattern {
				t.Errorf("%s: session_id pattern %q, the contract's %q", name, got, contract.SessionIDPattern)
			}
		}
	}
}
