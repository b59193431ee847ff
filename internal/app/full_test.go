package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/natstest"
)

// A store at the server's max_file_store (issue 42: every append waited
// 15 s and answered 503 retry, forever; /readyz said ready; a delete
// could not start). An append is refused at once with a storage error
// (507, not_applied), /readyz says the store is full, a delete frees
// space, appends pass again as soon as it is freed, and nothing
// acknowledged is lost.
func TestFullStore(t *testing.T) {
	srv := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 6 << 20})
	a, _ := service(t, srv.ClientURL(), nil, func(c *app.Config) { c.MetricsAddr, c.EventBytes = "127.0.0.1:0", 1<<20 })
	nc, _ := natstest.Connect(t, srv)
	request := func(subject string, body any) (string, contract.ErrorBody, time.Duration) {
		t.Helper()
		b, _ := json.Marshal(body)
		start := time.Now()
		m, err := nc.Request(subject, b, 60*time.Second)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		var eb contract.ErrorBody
		code := m.Header.Get("Nats-Service-Error-Code")
		if code != "" {
			_ = json.Unmarshal(m.Data, &eb)
		}
		return code, eb, took
	}
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 90) // about 4 KB
	acked := map[string][]string{}
	var code string
	var refused contract.ErrorBody
	var took time.Duration
	for i := 0; code == "" && i < 5000; i++ {
		sid := fmt.Sprint("full-", i%4)
		if i < 4 {
			if c, eb, _ := request(contract.SubjectCreate, map[string]any{"session_id": sid, "messages": []map[string]any{{"role": "system", "content": "an agent"}}}); c != "" {
				t.Fatalf("create %s: %s %+v", sid, c, eb)
			}
		}
		id := fmt.Sprint("m", i)
		code, refused, took = request(contract.SubjectAppend, map[string]any{"session_id": sid, "messages": []map[string]any{{"id": id, "role": "user", "content": text}}})
		if code == "" {
			acked[sid] = append(acked[sid], id)
		}
	}
	if code != "507" || refused.Status != contract.StatusNotApplied || !strings.Contains(refused.Error, "store full") {
		t.Fatalf("the append at the store's limit answered %s %+v, want 507 not_applied saying the store is full", code, refused)
	}
	t.Logf("refused after %d appends, in %v: %s", len(acked["full-0"])*4, took.Round(time.Millisecond), refused.Error)
	// Refused at once, not retried for the 15 s an unavailable store gets.
	if took > 5*time.Second {
		t.Fatalf("the refusal took %v", took)
	}
	// The Go client says so.
	gc, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.Append(context.Background(), "full-1", []client.Message{client.Text("by-client", client.User, text)}); !errors.Is(err, client.ErrStorageFull) {
		t.Fatalf("the Go client's append on a full store: %v, want ErrStorageFull", err)
	}
	if c, body := probe(a.MetricsAddr, "/readyz"); c != 503 || !strings.Contains(body, "room") {
		t.Fatalf("/readyz answered %d %q with the store full", c, body)
	}
	// A delete frees space, though nothing can be written.
	if c, eb, _ := request(contract.SubjectDelete, map[string]any{"session_id": "full-0"}); c != "" {
		t.Fatalf("delete on a full store: %s %+v", c, eb)
	}
	delete(acked, "full-0")
	var passed time.Time
	natstest.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		c, eb, _ := request(contract.SubjectAppend, map[string]any{"session_id": "full-1", "messages": []map[string]any{{"id": "after", "role": "user", "content": "space again"}}})
		if c != "" {
			return fmt.Errorf("append after the delete: %s %+v", c, eb)
		}
		passed = time.Now()
		return nil
	})
	acked["full-1"] = append(acked["full-1"], "after")
	if c, body := probe(a.MetricsAddr, "/readyz"); c != 200 {
		t.Fatalf("/readyz answered %d %q once writes passed again (%v)", c, body, passed)
	}
	for sid, ids := range acked {
		h, err := a.Sessions.History(context.Background(), sid)
		if err != nil {
			t.Fatalf("history of %s: %v", sid, err)
		}
		have := map[string]bool{}
		for _, m := range h.Messages {
			have[m.ID] = true
		}
		for _, id := range ids {
			if !have[id] {
				t.Fatalf("%s: acknowledged message %s lost", sid, id)
			}
		}
	}
}
