package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/inspect"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/tokens"
)

type env struct {
	store    *memstore.Store
	breakers *memstore.Breakers
	svc      *sessions.Service
	pipe     *pipeline.Service
	srv      *httptest.Server
}

func newEnv(t *testing.T, auth inspect.Authenticator, now ...func() time.Time) *env {
	t.Helper()
	return newEnvWith(t, auth, nil, now...)
}

// newEnvWith is newEnv with the result stream's events read by evs.
func newEnvWith(t *testing.T, auth inspect.Authenticator, evs func(ctx context.Context, filter string, since time.Time, max int) ([]events.Stored, error), now ...func() time.Time) *env {
	t.Helper()
	e := &env{store: memstore.New(), breakers: memstore.NewBreakers()}
	e.svc = sessions.New(e.store, e.breakers, nil)
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	if e.pipe, err = pipeline.New(e.store, e.breakers, extractive.New(counter), pipeline.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	cfg := inspect.Config{Sessions: e.svc, Breakers: e.breakers, Auth: auth, Tenants: func() []string { return []string{"acme"} }, Events: evs}
	if len(now) > 0 {
		cfg.Now = now[0]
	}
	mux.Handle(inspect.Prefix, inspect.Handler(cfg))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// agentTurns is an agent's session: a task, then tool calls whose results
// are long enough that clearing and summarising both have work.
func agentTurns(n int) []session.Message {
	msgs := []session.Message{{Role: session.RoleUser, Content: session.TextContent("Fix the failing test in pkg/<b>billing</b> and run go test ./...")}}
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function",
				Function: session.FunctionCall{Name: "bash", Arguments: fmt.Sprintf(`{"command":"cat pkg/billing/file_%d.go"}`, i)}}}},
			session.Message{Role: session.RoleTool, ToolCallID: id, Name: "bash",
				Content: session.TextContent(fmt.Sprintf("package billing // file %d\n%s", i, strings.Repeat("func f() { return } // <script>alert(1)</script>\n", 60)))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("file_%d.go read; next file.", i))})
	}
	return msgs
}

func (e *env) get(t *testing.T, path string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func TestInspectorPages(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.svc.Create(ctx, session.Record{SessionID: "agent-1", Model: "gpt-4o", ContextLimit: 8000}, agentTurns(12)); err != nil {
		t.Fatal(err)
	}
	res, err := e.pipe.Compact(ctx, pipeline.Request{ID: "r1", SessionID: "agent-1", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("first compaction: %v %+v", err, res)
	}
	if _, err := e.svc.Append(ctx, "agent-1", agentTurns(5)[1:], session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	res2, err := e.pipe.Compact(ctx, pipeline.Request{ID: "r2", SessionID: "agent-1", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res2.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("second compaction: %v %+v", err, res2)
	}
	for i := range 3 {
		if _, err := e.svc.Create(ctx, session.Record{SessionID: fmt.Sprintf("chat-%d", i)}, agentTurns(1)); err != nil {
			t.Fatal(err)
		}
	}
	// Another tenant's session of the same id: shown under its tenant only.
	acme := tenant.With(ctx, "acme")
	if _, err := e.svc.Create(acme, session.Record{SessionID: "acme-only"}, agentTurns(1)); err != nil {
		t.Fatal(err)
	}
	// chat-1's breaker is open, chat-2's counted one failure since and is closed.
	for _, f := range []struct {
		sid string
		n   int
	}{{"chat-1", 3}, {"chat-2", 1}} {
		for i := range f.n {
			if _, _, err := e.breakers.RecordFailure(ctx, f.sid, session.Failure{RequestID: fmt.Sprint(f.sid, i), Error: "summary_failed: provider answered 503 <overloaded>", MaxFailures: 3}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}

	code, body, hdr := e.get(t, "/ui/")
	if code != http.StatusOK {
		t.Fatalf("list: %d %s", code, body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script") {
		t.Errorf("the pages allow scripts: %q", csp)
	}
	for _, want := range []string{`href="/ui/sessions/agent-1"`, `href="/ui/sessions/chat-0"`, "8,000", "1 open"} {
		if !strings.Contains(body, want) {
			t.Errorf("the list lacks %q", want)
		}
	}
	if strings.Contains(body, "acme-only") {
		t.Error("the default tenant's list shows another tenant's session")
	}
	// Open breakers come first, with their reason escaped.
	if i, j := strings.Index(body, `class="breaker open"`), strings.Index(body, `class="breaker closed"`); i < 0 || j < 0 || i > j {
		t.Errorf("the open breaker is not listed first (%d, %d)", i, j)
	}
	if !strings.Contains(body, "provider answered 503 &lt;overloaded&gt;") {
		t.Error("a breaker's reason is not shown escaped")
	}

	// Filtered by prefix, and paged.
	_, body, _ = e.get(t, "/ui/?prefix=chat-")
	if strings.Contains(body, "agent-1") || strings.Count(body, `class="session"`) != 3 {
		t.Errorf("prefix chat- lists %d sessions", strings.Count(body, `class="session"`))
	}
	_, body, _ = e.get(t, "/ui/?tenant=acme")
	if !strings.Contains(body, "/ui/sessions/acme-only?tenant=acme") || strings.Contains(body, "agent-1") {
		t.Error("tenant acme's list is not its own")
	}

	// One session: both compactions side by side, the newest first.
	code, body, _ = e.get(t, "/ui/sessions/agent-1")
	if code != http.StatusOK {
		t.Fatalf("session: %d %s", code, body)
	}
	hist, _ := e.svc.History(ctx, "agent-1")
	if len(hist.Compactions) != 2 {
		t.Fatalf("%d compactions stored", len(hist.Compactions))
	}
	first, second := hist.Compactions[0], hist.Compactions[1]
	i, j := strings.Index(body, `id="c-`+second.ID+`"`), strings.Index(body, `id="c-`+first.ID+`"`)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("compactions not shown newest first (%d, %d)", i, j)
	}
	// The newest summarised, in force; the first only cleared tool
	// results, and says which.
	card, older := body[i:j], body[j:]
	m, f := second.Compaction, first.Compaction
	if m.Step != pipeline.StepSummarise || f.Step != pipeline.StepClear || f.ClearedNow == 0 {
		t.Fatalf("the compactions are %s and %s (%d cleared): the fixture no longer makes a clearing, then a summary", f.Step, m.Step, f.ClearedNow)
	}
	for _, want := range []string{"in force", fmt.Sprintf("%s</span> → <span class=\"after\">%s", comma(m.TokensBefore), comma(m.TokensAfter)),
		fmt.Sprintf("seqs %d–%d: %d messages", m.FromSeq, m.ToSeq, m.ToSeq-m.FromSeq+1), fmt.Sprintf("from seq %d", m.TailStartSeq)} {
		if !strings.Contains(card, want) {
			t.Errorf("the newest compaction's card lacks %q", want)
		}
	}
	if k := strings.Index(card, `<ul class="bullets">`); len(m.LedgerBullets) == 0 || k < 0 ||
		strings.Count(card[k:k+strings.Index(card[k:], "</ul>")], "<li>") != len(m.LedgerBullets) {
		t.Errorf("the card does not show the ledger's %d bullets", len(m.LedgerBullets))
	}
	for _, want := range []string{fmt.Sprintf("%d tool outputs, %s tokens", f.ClearedNow, comma(f.ClearedTokens)), "Summarised</dt>\n      <dd class=\"summarised\">nothing new",
		fmt.Sprintf("Cleared by this compaction (%d)", f.ClearedNow)} {
		if !strings.Contains(older, want) {
			t.Errorf("the clearing compaction's card lacks %q", want)
		}
	}
	if strings.Contains(older, "in force") {
		t.Error("the older compaction is shown in force")
	}
	// Message text is escaped, never markup.
	if strings.Contains(body, "<script>") || strings.Contains(body, "<b>billing</b>") {
		t.Error("a message's text reached the page unescaped")
	}

	// The history searched: a summarised message found with its snippet,
	// its text escaped; a bad expression or an unknown session refused.
	if !strings.Contains(body, `id="search-history"`) {
		t.Error("the session page has no search box")
	}
	code, body, _ = e.get(t, "/ui/sessions/agent-1/search?q=billing")
	if code != http.StatusOK || !strings.Contains(body, `id="search-count"`) || !strings.Contains(body, "summarised") || !strings.Contains(body, "billing") || strings.Contains(body, "<b>billing</b>") {
		t.Errorf("search: %d %s", code, body)
	}
	if code, body, _ := e.get(t, "/ui/sessions/agent-1/search"); code != http.StatusOK || strings.Contains(body, `id="search-count"`) {
		t.Errorf("the empty search form: %d %s", code, body)
	}

	// Errors: a clear page and status, never a 200.
	for path, want := range map[string]int{
		"/ui/sessions/agent-1/search?q=(&mode=regex": http.StatusBadRequest,
		"/ui/sessions/nope/search?q=x":               http.StatusNotFound,
		"/ui/sessions/nope":                          http.StatusNotFound,
		"/ui/sessions/bad%20id":                      http.StatusBadRequest,
		"/ui/?tenant=bad%20tenant":                   http.StatusBadRequest,
		"/ui/?prefix=%3Cscript%3E":                   http.StatusBadRequest,
		"/ui/sessions/agent-1/more":                  http.StatusNotFound,
	} {
		if code, body, _ := e.get(t, path); code != want {
			t.Errorf("%s: %d, want %d: %s", path, code, want, body)
		}
	}
	// Read-only.
	for _, method := range []string{http.MethodPost, http.MethodDelete, http.MethodPut} {
		req, _ := http.NewRequest(method, e.srv.URL+"/ui/sessions/agent-1", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 405", method, res.StatusCode)
		}
	}
	if _, err := e.svc.Context(ctx, "agent-1"); err != nil {
		t.Fatal(err)
	}
}

// A session's prepared compaction shows with its state, whether a
// request would commit it now, what it summarises and how old it is.
func TestInspectorShowsThePreparedCompaction(t *testing.T) {
	var clock time.Time
	e := newEnv(t, nil, func() time.Time { return clock })
	ctx := context.Background()
	var msgs []session.Message
	for i := range 40 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Question %d about invoice INV-%04d: %s", i, i, strings.Repeat("why was it billed twice? ", 12)))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Invoice INV-%04d was billed once; %s", i, strings.Repeat("the second line is a refund. ", 10)))})
	}
	if _, err := e.svc.Create(ctx, session.Record{SessionID: "chat", Model: "gpt-4o", ContextLimit: 9000}, msgs); err != nil {
		t.Fatal(err)
	}
	prep, err := e.pipe.Prepare(ctx, pipeline.PrepareRequest{SessionID: "chat", Trigger: pipeline.PrepareNearBudget})
	if err != nil || prep.Outcome != pipeline.PrepareDone {
		t.Fatalf("prepare: %v %+v", err, prep)
	}
	hist, err := e.svc.History(ctx, "chat")
	if err != nil || len(hist.Prepared) != 1 {
		t.Fatalf("history: %v, %d prepared", err, len(hist.Prepared))
	}
	clock = hist.Prepared[0].ReadyAt.Add(90 * time.Second)
	_, body, _ := e.get(t, "/ui/sessions/chat")
	k := strings.Index(body, `<section id="prepared">`)
	if k < 0 {
		t.Fatal("no prepared section")
	}
	section := body[k : k+strings.Index(body[k:], "</section>")]
	for _, want := range []string{`badge ready`, "usable now", `<dd id="prepared-age">1 min since ready</dd>`, "near_budget",
		fmt.Sprintf("seqs %d–%d", prep.FromSeq, prep.ToSeq), fmt.Sprintf("%s tokens at its head", comma(hist.Prepared[0].Compaction.Compaction.TokensAfter))} {
		if !strings.Contains(section, want) {
			t.Errorf("the prepared section lacks %q:\n%s", want, section)
		}
	}
	if !strings.Contains(body, `id="no-compactions"`) {
		t.Error("a prepared compaction is shown as committed")
	}
}

// The list pages through many sessions: each page holds PageSize, the
// last links no further, and every session is listed once.
func TestInspectorPaging(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	n := inspect.PageSize*2 + 7
	for i := range n {
		if _, err := e.svc.Create(ctx, session.Record{SessionID: fmt.Sprintf("s-%03d", i)}, agentTurns(0)); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	path := "/ui/"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("more pages than sessions")
		}
		_, body, _ := e.get(t, path)
		for _, part := range strings.Split(body, `<a href="/ui/sessions/`)[1:] {
			sid := part[:strings.Index(part, `"`)]
			if seen[sid] {
				t.Fatalf("%s listed twice", sid)
			}
			seen[sid] = true
		}
		path = ""
		if k := strings.Index(body, `id="next" href="`); k >= 0 {
			rest := body[k+len(`id="next" href="`):]
			path = strings.ReplaceAll(rest[:strings.Index(rest, `"`)], "&amp;", "&")
		}
	}
	if len(seen) != n {
		t.Fatalf("listed %d of %d sessions", len(seen), n)
	}
}

// With an Authenticator every page asks for credentials: none or refused
// ones get 401 with a Basic challenge, a user that is not an operator
// 403, a failing check 503, an operator the page.
func TestInspectorSignIn(t *testing.T) {
	e := newEnv(t, inspect.AuthFunc(func(_ context.Context, user, pass string) error {
		switch {
		case user == "admin" && pass == "right":
			return nil
		case user == "runtime":
			return fmt.Errorf("%w: runtime", inspect.ErrNotOperator)
		case user == "down":
			return errors.New("no NATS server")
		}
		return inspect.ErrUnauthenticated
	}))
	basic := func(user, pass string) []string {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.SetBasicAuth(user, pass)
		return []string{"Authorization", req.Header.Get("Authorization")}
	}
	code, _, hdr := e.get(t, "/ui/")
	if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("no credentials: %d %q", code, hdr.Get("WWW-Authenticate"))
	}
	for _, c := range []struct {
		user, pass string
		want       int
	}{{"admin", "wrong", 401}, {"runtime", "x", 403}, {"down", "x", 503}, {"admin", "right", 200}} {
		for _, path := range []string{"/ui/", "/ui/style.css", "/ui/sessions/x"} {
			code, _, _ := e.get(t, path, basic(c.user, c.pass)...)
			if path == "/ui/sessions/x" && c.want == 200 {
				c.want = 404
			}
			if code != c.want {
				t.Errorf("%s as %s: %d, want %d", path, c.user, code, c.want)
			}
		}
	}
}

func comma(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Issue 42, what an operator looks for: the list shows each session's
// context use and breaker, the fullest and the broken first (a session at
// 169 % of its window looked normal); a session's page lists its requests,
// failures that opened no breaker among them, with their trace ids, and
// says how each compaction came (a preparation, its trigger, its time); a
// request is found by its id or its trace id; the context can be read.
func TestInspectorShowsWhatAnOperatorLooksFor(t *testing.T) {
	now := time.Now()
	var e *env
	evs := func(_ context.Context, filter string, since time.Time, max int) ([]events.Stored, error) {
		all := []events.Stored{
			{Seq: 1, Time: now.Add(-time.Minute), Subject: "compaction.failed.over", ID: "f-1", Type: contract.TypeCompactionFailed, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
				Data: map[string]any{"session_id": "over", "request_id": "req-failed", "trigger": "over_budget", "reason": "summary_failed", "error": "provider answered 503", "duration_ms": 1200.0}},
			{Seq: 2, Time: now.Add(-30 * time.Second), Subject: "compaction.completed.over", ID: "c-1", Type: contract.TypeCompactionCompleted,
				Data: map[string]any{"session_id": "over", "request_id": "req-ok", "trigger": "over_budget", "outcome": "compacted", "strategy": "prepared", "prepared_age_ms": 4000.0,
					"duration_ms": 14.0, "llm_calls": 0.0, "tokens_before": 3400.0, "tokens_after": 1200.0}},
		}
		var out []events.Stored
		for _, ev := range all {
			if filter == "compaction.>" || strings.HasSuffix(filter, ".over") {
				out = append(out, ev)
			}
		}
		return out, nil
	}
	e = newEnvWith(t, nil, evs)
	ctx := context.Background()
	if _, err := e.svc.Create(ctx, session.Record{SessionID: "calm", Model: "gpt-4o", ContextLimit: 100000}, agentTurns(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, session.Record{SessionID: "over", Model: "gpt-4o", ContextLimit: 1000}, agentTurns(3)); err != nil {
		t.Fatal(err)
	}
	code, body, _ := e.get(t, "/ui/")
	if code != 200 {
		t.Fatalf("list: %d", code)
	}
	over, calm := strings.Index(body, `href="/ui/sessions/over"`), strings.Index(body, `href="/ui/sessions/calm"`)
	if over < 0 || calm < 0 || over > calm || !strings.Contains(body, `<tr class="session over">`) {
		t.Fatalf("the list does not put the session over its window first, marked:\n%s", body)
	}
	code, body, _ = e.get(t, "/ui/sessions/over")
	if code != 200 {
		t.Fatalf("session: %d", code)
	}
	for _, want := range []string{`id="r-req-failed"`, "summary_failed: provider answered 503", "4bf92f3577b34da6a3ce929d0e0e4736", `id="r-req-ok"`, "prepared 4 s ahead", "3,400 → 1,200", `href="/ui/sessions/over/context"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the session page lacks %q", want)
		}
	}
	for _, q := range []string{"req-failed", "4bf92f3577b34da6a3ce929d0e0e4736"} {
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(e.srv.URL + "/ui/find?q=" + q)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/sessions/over#r-req-failed" {
			t.Fatalf("find %s: %d %s", q, res.StatusCode, res.Header.Get("Location"))
		}
	}
	if code, _, _ := e.get(t, "/ui/find?q=no-such-request"); code != 404 {
		t.Fatalf("find of a request never made: %d", code)
	}
	code, body, _ = e.get(t, "/ui/sessions/over/context")
	if code != 200 || strings.Count(body, `<li class="message`) != len(agentTurns(3)) {
		t.Fatalf("the context page: %d, %d messages, want %d", code, strings.Count(body, `<li class="message`), len(agentTurns(3)))
	}
}
