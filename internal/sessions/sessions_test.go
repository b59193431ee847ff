package sessions_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
)

func msgs(texts ...string) []session.Message {
	var out []session.Message
	for i, t := range texts {
		role := session.RoleUser
		if i%2 == 1 {
			role = session.RoleAssistant
		}
		out = append(out, session.Message{Role: role, Content: session.TextContent(t)})
	}
	return out
}

// The use cases run over the in-memory store as over KV: counted tokens,
// repeated writes applied once, delete with the breaker.
func TestUseCasesOverMemory(t *testing.T) {
	ctx := context.Background()
	store, breakers := memstore.New(), memstore.NewBreakers()
	svc := sessions.New(store, breakers, nil)
	first := append([]session.Message{{Role: session.RoleSystem, Content: session.TextContent("be brief")}}, msgs("hi", "hello")...)
	c, err := svc.Create(ctx, session.Record{SessionID: "s"}, first)
	if err != nil || c.Model != sessions.DefaultModel || c.Tokens == 0 || c.HeadSeq != 3 {
		t.Fatalf("create: %+v %v", c, err)
	}
	if again, err := svc.Create(ctx, session.Record{SessionID: "s"}, first); err != nil || again != c {
		t.Fatalf("the same create: %+v %v", again, err)
	}
	turn := msgs("where is my bag?")
	turn[0].ID = "u1"
	a, err := svc.Append(ctx, "s", turn, session.AppendOptions{})
	if err != nil || a.Status != sessions.StatusApplied || a.Bytes == 0 || a.HeadSeq != 4 {
		t.Fatalf("append: %+v %v", a, err)
	}
	if turn[0].Tokens != 0 {
		t.Fatal("Append changed the caller's messages")
	}
	if a2, err := svc.Append(ctx, "s", turn, session.AppendOptions{}); err != nil || a2.Status != sessions.StatusAlreadyApplied || a2.Bytes != 0 {
		t.Fatalf("the same append: %+v %v", a2, err)
	}
	v, err := svc.Context(ctx, "s")
	if err != nil || len(v.Messages) != 4 || v.Tokens == 0 || v.HeadSeq != 4 {
		t.Fatalf("context: %+v %v", v, err)
	}
	if m, err := svc.Message(ctx, "s", 4); err != nil || m.ID != "u1" {
		t.Fatalf("message: %+v %v", m, err)
	}
	// A message in two uploaded parts, appended by its upload id.
	whole := []byte(`{"id":"big","role":"user","content":"a long paste"}`)
	for i, part := range [][]byte{whole[:20], whole[20:]} {
		if _, err := svc.Upload(ctx, "s", "up-1", i, 2, part); err != nil {
			t.Fatal(err)
		}
	}
	raw, ids, err := svc.ResolveUploads(ctx, "s", []byte(`[{"upload_id":"up-1"}]`))
	if err != nil || len(ids) != 1 || string(raw) != "["+string(whole)+"]" {
		t.Fatalf("resolve: %s %v %v", raw, ids, err)
	}
	svc.DropUploads(ctx, "s", ids)
	if _, _, err := svc.ResolveUploads(ctx, "s", []byte(`[{"upload_id":"up-1"}]`)); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("a dropped upload: %v", err)
	}
	if _, err := svc.Upload(ctx, "s", "up-2", 2, 2, whole); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("part out of range: %v", err)
	}
	if mp, err := svc.MessagePart(ctx, "s", 4, 0); err != nil || mp.Parts != 1 || !strings.Contains(string(mp.Data), `"u1"`) {
		t.Fatalf("message part: %+v %v", mp, err)
	}
	breakers.RecordFailure(ctx, "s", session.Failure{RequestID: "r1", Error: "x", MaxFailures: 3}, time.Now())
	if d, err := svc.Delete(ctx, "s"); err != nil || !d.Deleted {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := svc.Context(ctx, "s"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("context after delete: %v", err)
	}
	if b, _ := breakers.Breaker(ctx, "s"); b.Failures != 0 {
		t.Fatalf("the breaker outlived its session: %+v", b)
	}
	if _, err := svc.Append(ctx, "s", msgs("x"), session.AppendOptions{}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("append after delete: %v", err)
	}
}

// The hooks hear every create answered and every append that applied
// messages, whichever driver calls the use case; a repeated append, which
// writes nothing, and a refused one are not heard.
func TestHooksHearTheWrites(t *testing.T) {
	ctx := context.Background()
	var created []sessions.Created
	var appended []sessions.Appended
	svc := sessions.New(memstore.New(), memstore.NewBreakers(), nil, sessions.WithHooks(sessions.Hooks{
		Created:  func(_ context.Context, c sessions.Created) { created = append(created, c) },
		Appended: func(_ context.Context, a sessions.Appended) { appended = append(appended, a) },
	}))
	c, err := svc.Create(ctx, session.Record{SessionID: "s"}, msgs("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, session.Record{SessionID: "s"}, msgs("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, session.Record{SessionID: "s"}, msgs("another")); !errors.Is(err, session.ErrExists) {
		t.Fatalf("a create of another content: %v", err)
	}
	if len(created) != 2 || created[0] != c || created[1] != c {
		t.Fatalf("created heard %+v, want the create and its repeat", created)
	}
	turn := msgs("where is my bag?")
	turn[0].ID = "u1"
	a, err := svc.Append(ctx, "s", turn, session.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Append(ctx, "s", turn, session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	head := int64(1)
	if _, err := svc.Append(ctx, "s", msgs("late"), session.AppendOptions{ExpectedHeadSeq: &head}); !errors.Is(err, session.ErrHeadMoved) {
		t.Fatalf("an append at a moved head: %v", err)
	}
	if len(appended) != 1 || appended[0].HeadSeq != a.HeadSeq || appended[0].FirstSeq != a.FirstSeq || appended[0].Bytes == 0 {
		t.Fatalf("appended heard %+v, want the one append that applied (%+v)", appended, a)
	}
}
