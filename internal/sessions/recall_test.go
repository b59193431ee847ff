package sessions_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
)

// Two replicas over one store: the one that never searched the session
// builds its index from the log and answers what the other does, after
// appends made through either; a replica whose index memory is spent
// drops the least recently searched and builds it again, with the same
// answers; a tenant does not find another's session under the same id.
func TestSearchAcrossReplicasAndTenants(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	a := sessions.New(store, nil, nil)
	b := sessions.New(store, nil, nil, sessions.WithRecallMemory(1))
	var first []session.Message
	for i := range 40 {
		first = append(first, msgs(fmt.Sprintf("is ticket TCK-%03d fixed?", i), fmt.Sprintf("ticket TCK-%03d was fixed in build %d", i, 100+i))...)
	}
	if _, err := a.Create(ctx, session.Record{SessionID: "s"}, first); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, session.Record{SessionID: "other"}, first[:10]); err != nil {
		t.Fatal(err)
	}
	search := func(svc *sessions.Service, q string) []int64 {
		t.Helper()
		ans, err := svc.Search(ctx, contract.SearchBody{SessionID: "s", Query: q})
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, h := range ans.Hits {
			seqs = append(seqs, h.Seq)
		}
		return seqs
	}
	for round := range 3 {
		q := fmt.Sprintf("TCK-%03d build", 10+round)
		if ha, hb := search(a, q), search(b, q); len(ha) == 0 || !slices.Equal(ha, hb) {
			t.Fatalf("round %d: replica a answers %v, b %v", round, ha, hb)
		}
		// b searches another session: its one index goes, and is built
		// again by the next search.
		if _, err := b.Search(ctx, contract.SearchBody{SessionID: "other", Query: "ticket"}); err != nil {
			t.Fatal(err)
		}
		via := []*sessions.Service{a, b}[round%2]
		late := msgs(fmt.Sprintf("and TCK-9%02d?", round))
		if _, err := via.Append(ctx, "s", late, session.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if ha, hb := search(a, fmt.Sprintf("TCK-9%02d", round)), search(b, fmt.Sprintf("TCK-9%02d", round)); len(ha) == 0 || ha[0] != int64(81+round) || !slices.Equal(ha, hb) {
			t.Fatalf("round %d: the appended message: a %v, b %v", round, ha, hb)
		}
	}
	if n, _ := b.Recall().Stats(); n != 1 {
		t.Fatalf("replica b holds %d indexes within its bound of 1 byte, want the last one only", n)
	}
	if _, err := a.Search(tenant.With(ctx, "acme"), contract.SearchBody{SessionID: "s", Query: "ticket"}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("another tenant's search of the session: %v", err)
	}
	for _, bad := range []contract.SearchBody{{SessionID: "s"}, {SessionID: "s", Query: "x", Mode: "fuzzy"}, {SessionID: "s", Query: "x", Limit: 51},
		{SessionID: "s", Query: "x", Roles: []string{"robot"}}, {SessionID: "s", Query: "x", States: []contract.MessageState{"gone"}}, {SessionID: "s", Query: "x", FromSeq: 9, ToSeq: 3}} {
		if _, err := a.Search(ctx, bad); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}
	for _, bad := range []contract.ExpandBody{{SessionID: "s"}, {SessionID: "s", FromSeq: 1, ToolCallID: "c"}, {SessionID: "s", FromSeq: 1, Limit: 101}} {
		if _, err := a.Expand(ctx, bad); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}
	page, err := a.Expand(ctx, contract.ExpandBody{SessionID: "s", FromSeq: 5, ToSeq: 9, Limit: 2})
	if err != nil || len(page.Messages) != 2 || page.Messages[0].Seq != 5 || page.Next != 6 || page.States[0] != contract.StateRaw {
		t.Fatalf("expand 5..9 by 2: %+v %v", page, err)
	}
	last, err := a.Expand(ctx, contract.ExpandBody{SessionID: "s", FromSeq: 5, ToSeq: 9, Limit: 2, After: 8})
	if err != nil || len(last.Messages) != 1 || last.Messages[0].Seq != 9 || last.Next != 0 {
		t.Fatalf("the last page: %+v %v", last, err)
	}
}

// A search with all_sessions reads the tenant's other sessions too: a hit
// names its session; another tenant's sessions are not among them; it
// ranks by terms only.
func TestSearchAllSessionsOfATenant(t *testing.T) {
	ctx := context.Background()
	svc := sessions.New(memstore.New(), nil, nil)
	acme := tenant.With(ctx, "acme")
	for _, c := range []struct {
		ctx  context.Context
		sid  string
		text string
	}{
		{ctx, "here", "we chose Postgres for the ledger service"},
		{ctx, "there", "the deploy key is stored in vault path secret/deploy-7"},
		{acme, "theirs", "acme's deploy key is in vault path secret/acme-1"},
	} {
		if _, err := svc.Create(c.ctx, session.Record{SessionID: c.sid}, msgs(c.text, "noted")); err != nil {
			t.Fatal(err)
		}
	}
	ans, err := svc.Search(ctx, contract.SearchBody{SessionID: "here", Query: "where is the deploy key in vault?", AllSessions: true})
	if err != nil || len(ans.Hits) == 0 || ans.Hits[0].SessionID != "there" || ans.HeadSeq != 2 {
		t.Fatalf("all sessions: %+v %v", ans, err)
	}
	for _, h := range ans.Hits {
		if h.SessionID == "theirs" {
			t.Fatalf("another tenant's session searched: %+v", h)
		}
	}
	if _, err := svc.Search(ctx, contract.SearchBody{SessionID: "here", Query: "vault", Mode: contract.SearchRegex, AllSessions: true}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("a regex over all sessions: %v", err)
	}
}
