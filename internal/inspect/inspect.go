// Package inspect is the operator's inspector page (`serve --ui`): the
// sessions a tenant holds, paged and filtered by id prefix; one session's
// compactions side by side — what each summarised, cleared and kept, the
// tokens before and after, its ledger — with the prepared compaction and
// its age; and the breakers, open ones first, with their reason.
//
// It is read-only (GET and HEAD only), rendered on the server with
// html/template (no script at all, and a Content-Security-Policy that
// allows none), and reads through the same use cases as the endpoints.
// With an Authenticator set every page asks for credentials (HTTP Basic):
// the service checks them against NATS (NATSAuth), so the page is behind
// the operator's NATS user when nats.conf's roles are on.
package inspect

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
)

// Prefix is where the pages are served.
const Prefix = "/ui/"

// PageSize is how many sessions a page of the list shows.
const PageSize = 50

// MaxBreakers bounds the breakers one list page reads (open ones are
// shown first among them).
const MaxBreakers = 10 * session.MaxPageSize

// maxListed bounds the summarised messages a compaction lists by name.
const maxListed = 200

// Breakers is what the page reads of the breaker store.
type Breakers interface {
	Breaker(ctx context.Context, sessionID string) (session.Breaker, error)
	Page(ctx context.Context, after string, limit int) (session.BreakerPage, error)
}

// Config is what the pages read from.
type Config struct {
	Sessions *sessions.Service
	Breakers Breakers
	// Tenants answers the tenants that hold sessions (nil: the default
	// tenant only).
	Tenants func() []string
	// Auth checks every request's credentials (nil: the pages are open,
	// as the metrics are).
	Auth Authenticator
	// Events reads the result stream's events on filter (a tenant's
	// subjects, a session's) stored since since, oldest first, at most max
	// (nil: no requests shown, no search).
	Events func(ctx context.Context, filter string, since time.Time, max int) ([]events.Stored, error)
	// Now is the clock ages are told by (nil: time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// requestsSince is how far back a session's requests are shown, and
// searchSince how far back a request is searched for.
const (
	requestsSince = 7 * 24 * time.Hour
	maxRequests   = 200
	searchSince   = 24 * time.Hour
	maxSearched   = 20_000
)

//go:embed templates/*.html templates/style.css
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"num":    num,
	"field":  field,
	"ms":     func(v any) string { f, _ := v.(float64); return ago(time.Duration(f) * time.Millisecond) },
	"over":   func(part, whole int) bool { return whole > 0 && part > whole },
	"pct":    pct,
	"ago":    ago,
	"clock":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"add":    func(a, b int) int { return a + b },
	"seqs":   seqs,
	"tenant": tenantName,
	"plural": plural,
}).ParseFS(files, "templates/*.html"))

// Handler serves the pages under Prefix.
func Handler(cfg Config) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"{$}", h.list)
	mux.HandleFunc("GET "+Prefix+"sessions/{id}", h.session)
	mux.HandleFunc("GET "+Prefix+"sessions/{id}/context", h.context)
	mux.HandleFunc("GET "+Prefix+"sessions/{id}/search", h.search)
	mux.HandleFunc("GET "+Prefix+"find", h.find)
	mux.HandleFunc("GET "+Prefix+"style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		http.ServeFileFS(w, r, files, "templates/style.css")
	})
	return h.guard(mux)
}

type handler struct{ cfg Config }

// guard sets the headers every answer carries and, with an
// Authenticator, refuses a request without an operator's credentials.
func (h *handler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		if h.cfg.Auth != nil {
			user, pass, ok := r.BasicAuth()
			var err error
			if !ok {
				err = fmt.Errorf("%w: sign in with an operator's NATS user and password", ErrUnauthenticated)
			} else {
				err = h.cfg.Auth.Authenticate(r.Context(), user, pass)
			}
			switch {
			case errors.Is(err, ErrUnauthenticated):
				hd.Set("WWW-Authenticate", `Basic realm="compactor inspector", charset="UTF-8"`)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			case errors.Is(err, ErrNotOperator):
				h.cfg.Logger.Warn("inspector: refused a user that is not an operator", slog.String("user", user))
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			case err != nil:
				h.cfg.Logger.Warn("inspector: could not check credentials", slog.String("error", err.Error()))
				http.Error(w, "cannot check credentials now: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Title   string
	Tenant  string
	Tenants []string
	Now     time.Time
	Data    any
}

// scope reads the tenant a page is asked for, and the context it reads in.
func (h *handler) scope(r *http.Request) (context.Context, string, error) {
	name := r.URL.Query().Get("tenant")
	if name == "" || name == tenant.Default {
		return r.Context(), tenant.Default, nil
	}
	if err := tenant.Check(name); err != nil {
		return nil, "", err
	}
	return tenant.With(r.Context(), name), name, nil
}

func (h *handler) tenants(current string) []string {
	var out []string
	if h.cfg.Tenants != nil {
		out = h.cfg.Tenants()
	}
	out = append(out, tenant.Default, current)
	slices.Sort(out)
	return slices.Compact(out)
}

// listView is the sessions page.
type listView struct {
	Prefix   string
	Sessions []listedView
	// Next is the next page ("" on the last), FirstPage the first (""
	// on the first).
	Next, FirstPage template.URL
	// Breakers are the tenant's breakers, open ones first; Open counts
	// the open ones, More those not shown, Partial says the store held
	// more than MaxBreakers.
	Breakers []session.Breaker
	Open     int
	More     int
	Partial  bool
}

// listedView is a session as the list shows it: with what its context
// holds now and its breaker.
type listedView struct {
	session.Listed
	Tokens  int
	Breaker session.BreakerState // open, closed, or "" (never tripped)
	Err     string               // its context could not be read
}

// breakersShown bounds the breakers the list page shows.
const breakersShown = 50

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ctx, tn, err := h.scope(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q := r.URL.Query()
	v := listView{Prefix: q.Get("prefix")}
	if v.Prefix != "" && !contract.ValidSessionID(v.Prefix) {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("prefix: %v", contract.CheckSessionID(v.Prefix)))
		return
	}
	page, err := h.cfg.Sessions.List(ctx, session.ListOptions{After: q.Get("after"), Limit: PageSize, Prefix: v.Prefix})
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	for _, l := range page.Sessions { // a session without its own limit has its model's
		l.ContextLimit = h.cfg.Sessions.LimitOf(session.Record{Model: l.Model, ContextLimit: l.ContextLimit})
		v.Sessions = append(v.Sessions, listedView{Listed: l})
	}
	h.contexts(ctx, v.Sessions)
	if page.Next != "" {
		v.Next = pageLink(page.Next, v.Prefix, tn)
	}
	if q.Get("after") != "" {
		v.FirstPage = pageLink("", v.Prefix, tn)
	}
	all, partial, err := h.breakers(ctx)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	v.withBreakers(all, partial)
	// What needs a look first: an open breaker, then the fullest context.
	slices.SortStableFunc(v.Sessions, func(a, b listedView) int {
		if (a.Breaker == session.BreakerOpen) != (b.Breaker == session.BreakerOpen) {
			if a.Breaker == session.BreakerOpen {
				return -1
			}
			return 1
		}
		return cmp.Compare(use(b), use(a))
	})
	h.render(w, r, "list.html", tn, "Sessions", v)
}

// pageLink is the list's link to the page after after ("": the first),
// keeping its prefix and tenant.
func pageLink(after, prefix, tn string) template.URL {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if tn != tenant.Default {
		q.Set("tenant", tn)
	}
	if len(q) == 0 {
		return Prefix
	}
	return template.URL(Prefix + "?" + q.Encode()) // built by url.Values: escaped
}

// withBreakers adds the stored breakers to the list: open first, the most
// recently opened first, then the others, the most recently written
// first (breakersShown of them); and each listed session's state.
func (v *listView) withBreakers(all []session.Breaker, partial bool) {
	slices.SortStableFunc(all, func(a, b session.Breaker) int {
		if a.Open() != b.Open() {
			if a.Open() {
				return -1
			}
			return 1
		}
		return b.UpdatedAt.Compare(a.UpdatedAt)
	})
	for _, b := range all {
		if b.Open() {
			v.Open++
		}
	}
	v.Breakers, v.Partial = all[:min(len(all), breakersShown)], partial
	v.More = len(all) - len(v.Breakers)
	states := make(map[string]session.BreakerState, len(all))
	for _, b := range all {
		states[b.SessionID] = b.State
	}
	for i := range v.Sessions {
		v.Sessions[i].Breaker = states[v.Sessions[i].SessionID]
	}
}

// use is a session's context over its limit.
func use(l listedView) float64 {
	if l.ContextLimit <= 0 {
		return 0
	}
	return float64(l.Tokens) / float64(l.ContextLimit)
}

// contexts counts what each listed session's context holds now, a few at
// once.
func (h *handler) contexts(ctx context.Context, ls []listedView) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range ls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cv, err := h.cfg.Sessions.Context(ctx, ls[i].SessionID)
			if err != nil {
				ls[i].Err = err.Error()
				return
			}
			ls[i].Tokens = cv.Tokens
		}()
	}
	wg.Wait()
}

// breakers reads up to MaxBreakers of the tenant's breakers.
func (h *handler) breakers(ctx context.Context) (out []session.Breaker, partial bool, err error) {
	for after := ""; ; {
		page, err := h.cfg.Breakers.Page(ctx, after, session.MaxPageSize)
		if err != nil {
			return nil, false, err
		}
		out = append(out, page.Breakers...)
		if page.Next == "" {
			return out, false, nil
		}
		if len(out) >= MaxBreakers {
			return out, true, nil
		}
		after = page.Next
	}
}

// sessionView is one session's page.
type sessionView struct {
	Record  session.Record
	Tokens  int // what the model sees now
	Limit   int
	Breaker session.Breaker
	// Compactions, the newest first.
	Compactions []compactionView
	Prepared    []preparedView
	// Kept is what the context holds raw now: from KeptFrom to the head.
	KeptFrom int64
	Raw      int
	// Requests are the session's result and circuit events of the last
	// requestsSince, the newest first (Partial: more than maxRequests);
	// RequestsErr says why they could not be read.
	Requests    []events.Stored
	Partial     bool
	RequestsErr string
}

// compactionView is one compaction as the page shows it.
type compactionView struct {
	N         int // its place in the session's compactions, from 1
	ID        string
	Seq       int64
	InForce   bool
	CreatedAt time.Time
	Meta      session.CompactionMeta
	// Summarised are the messages this compaction summarised (at most
	// maxListed of them), SummarisedTokens their tokens.
	Summarised       []line
	SummarisedMore   int
	SummarisedTokens int
	// ClearedNow are the results it cleared (of Meta.Cleared, those not
	// cleared by the compaction before it).
	ClearedNow []session.Cleared
	Saved      int // tokens before less after
	Ledger     []count
	// Result is the data of the request's CompactionCompleted that made
	// it (strategy, trigger, duration, a preparation's age), when read.
	Result map[string]any
}

// line is a message as a list names it.
type line struct {
	Seq     int64
	Role    string
	Tool    string
	Tokens  int
	Opening string
}

type count struct {
	Name string
	N    int
}

// preparedView is the prepared compaction and how old it is.
type preparedView struct {
	sessions.Prepared
	Age    time.Duration
	Tokens int // the context its commit would leave, when ready
}

// sessionScope is a session page's tenant scope and session id (the
// path's {id}); on an error it answers 400 and returns false.
func (h *handler) sessionScope(w http.ResponseWriter, r *http.Request) (context.Context, string, string, bool) {
	ctx, tn, err := h.scope(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return nil, "", "", false
	}
	sid := r.PathValue("id")
	if err := contract.CheckSessionID(sid); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return nil, "", "", false
	}
	return ctx, tn, sid, true
}

func (h *handler) session(w http.ResponseWriter, r *http.Request) {
	ctx, tn, sid, ok := h.sessionScope(w, r)
	if !ok {
		return
	}
	hist, err := h.cfg.Sessions.History(ctx, sid)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	cv, err := h.cfg.Sessions.Context(ctx, sid)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	br, err := h.cfg.Breakers.Breaker(ctx, sid)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		h.fail(w, r, status(err), err)
		return
	}
	// What a compaction summarised, in tokens: messages appended since
	// the last read store no count yet.
	if err := h.cfg.Sessions.Count(hist.Record.Model, hist.Messages); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	now := h.cfg.Now()
	v := sessionView{Record: hist.Record, Tokens: cv.Tokens, Limit: cv.ContextLimit, Breaker: br, KeptFrom: 1}
	byRequest := h.requests(ctx, tn, sid, now, &v)
	for _, m := range cv.Messages {
		if !m.IsCompaction {
			v.Raw++
		}
	}
	v.Compactions, v.KeptFrom = compactionsOf(hist, byRequest)
	for _, p := range hist.Prepared {
		pv := preparedView{Prepared: p, Age: now.Sub(cmp.Or(p.ReadyAt, p.StartedAt))}
		if p.Compaction != nil && p.Compaction.Compaction != nil {
			pv.Tokens = p.Compaction.Compaction.TokensAfter
		}
		v.Prepared = append(v.Prepared, pv)
	}
	h.render(w, r, "session.html", tn, sid, v)
}

// requests reads the session's result events of the last requestsSince
// (at most maxRequests, newest first) into v, and returns the completed
// ones' data by request id.
func (h *handler) requests(ctx context.Context, tn, sid string, now time.Time, v *sessionView) map[string]map[string]any {
	byRequest := map[string]map[string]any{}
	if h.cfg.Events == nil {
		return byRequest
	}
	evs, err := h.cfg.Events(ctx, tenant.Subject(tn, "compaction.*."+sid), now.Add(-requestsSince), maxRequests+1)
	if err != nil {
		v.RequestsErr = err.Error()
	}
	if len(evs) > maxRequests {
		evs, v.Partial = evs[len(evs)-maxRequests:], true
	}
	for _, ev := range evs {
		if rid, _ := ev.Data["request_id"].(string); ev.Type == contract.TypeCompactionCompleted && rid != "" {
			byRequest[rid] = ev.Data
		}
	}
	slices.Reverse(evs)
	v.Requests = evs
	return byRequest
}

// compactionsOf is the session's compactions, newest first (what each
// summarised and newly cleared, and its result), and the seq the raw
// tail of the compaction in force starts at (1 when none is).
func compactionsOf(hist sessions.History, byRequest map[string]map[string]any) ([]compactionView, int64) {
	bySeq := make(map[int64]*session.Message, len(hist.Messages))
	for i := range hist.Messages {
		bySeq[hist.Messages[i].Seq] = &hist.Messages[i]
	}
	var out []compactionView
	keptFrom := int64(1)
	var before map[int64]bool // what the compaction before had cleared
	for _, c := range hist.Compactions {
		if c.Compaction == nil {
			continue
		}
		m := *c.Compaction
		view := compactionView{N: len(out) + 1, ID: c.ID, Seq: c.Seq, InForce: c.ID == hist.Record.CompactionID, CreatedAt: m.CreatedAt,
			Meta: m, Saved: m.TokensBefore - m.TokensAfter, Ledger: ledgerCounts(m), Result: byRequest[m.RequestID]}
		if m.Step != pipeline.StepClear {
			for seq := m.FromSeq; seq > 0 && seq <= m.ToSeq; seq++ {
				msg, ok := bySeq[seq]
				if !ok {
					continue
				}
				view.SummarisedTokens += msg.Tokens
				if len(view.Summarised) < maxListed {
					view.Summarised = append(view.Summarised, lineOf(msg))
				} else {
					view.SummarisedMore++
				}
			}
		}
		now := map[int64]bool{}
		for _, cl := range m.Cleared {
			now[cl.Seq] = true
			if !before[cl.Seq] {
				view.ClearedNow = append(view.ClearedNow, cl)
			}
		}
		before = now
		if view.InForce {
			keptFrom = max(m.TailStartSeq, 1)
		}
		out = append(out, view)
	}
	slices.Reverse(out)
	return out, keptFrom
}

// contextView is the context a session's runtime gets now.
type contextView struct {
	SessionID string
	Tokens    int
	Limit     int
	Messages  []session.Message
}

func (h *handler) context(w http.ResponseWriter, r *http.Request) {
	ctx, tn, sid, ok := h.sessionScope(w, r)
	if !ok {
		return
	}
	cv, err := h.cfg.Sessions.Context(ctx, sid)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	h.render(w, r, "context.html", tn, sid+" · context", contextView{SessionID: sid, Tokens: cv.Tokens, Limit: cv.ContextLimit, Messages: cv.Messages})
}

// searchView is a search of a session's history.
type searchView struct {
	SessionID, Query, Mode string
	HeadSeq                int64
	Hits                   []contract.SearchHit
}

// search searches the session's stored messages (compactor.session.search's
// use case): the form, and the hits with their snippets.
func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	ctx, tn, sid, ok := h.sessionScope(w, r)
	if !ok {
		return
	}
	v := searchView{SessionID: sid, Query: strings.TrimSpace(r.URL.Query().Get("q")), Mode: cmp.Or(r.URL.Query().Get("mode"), contract.SearchTerms)}
	if v.Query != "" {
		ans, err := h.cfg.Sessions.Search(ctx, contract.SearchBody{SessionID: sid, Query: v.Query, Mode: v.Mode})
		if err != nil {
			h.fail(w, r, status(err), err)
			return
		}
		v.HeadSeq, v.Hits = ans.HeadSeq, ans.Hits
	}
	h.render(w, r, "search.html", tn, sid+" · search", v)
}

// find looks for a request by its id, or by the trace id its result
// carries, among the tenant's results of the last searchSince, and goes
// to its session's page.
func (h *handler) find(w http.ResponseWriter, r *http.Request) {
	ctx, tn, err := h.scope(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" || len(q) > 256 {
		h.fail(w, r, http.StatusBadRequest, errors.New("give a request id or a trace id (at most 256 characters)"))
		return
	}
	if h.cfg.Events == nil {
		h.fail(w, r, http.StatusNotFound, errors.New("the results cannot be searched here"))
		return
	}
	evs, err := h.cfg.Events(ctx, tenant.Subject(tn, "compaction.>"), h.cfg.Now().Add(-searchSince), maxSearched)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	for _, ev := range evs {
		rid, _ := ev.Data["request_id"].(string)
		sid, _ := ev.Data["session_id"].(string)
		if sid == "" || (rid != q && ev.TraceID != q && ev.ID != q) {
			continue
		}
		u := Prefix + "sessions/" + url.PathEscape(sid)
		if tn != tenant.Default {
			u += "?tenant=" + url.QueryEscape(tn)
		}
		http.Redirect(w, r, u+"#r-"+url.PathEscape(rid), http.StatusSeeOther)
		return
	}
	h.fail(w, r, http.StatusNotFound, fmt.Errorf("no result of a request %.64q, or with that trace id, among the %s of the last %s", q, plural(len(evs), "result event"), ago(searchSince)))
}

// field reads a key of an event's data for a template ("" when absent).
func field(data map[string]any, key string) any {
	if v, ok := data[key]; ok && v != nil {
		return v
	}
	return ""
}

func lineOf(m *session.Message) line {
	l := line{Seq: m.Seq, Role: string(m.Role), Tokens: m.Tokens, Opening: opening(m.Text(), 120)}
	if m.Role == session.RoleTool {
		l.Tool = m.Name
	}
	if len(m.ToolCalls) > 0 {
		names := make([]string, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			names[i] = tc.Function.Name
		}
		l.Tool = strings.Join(names, ", ")
		if l.Opening == "" {
			l.Opening = "calls " + l.Tool
		}
	}
	return l
}

// opening is s's first n runes on one line.
func opening(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func ledgerCounts(m session.CompactionMeta) []count {
	l := m.Ledger
	if l == nil {
		return nil
	}
	all := []count{{"file", len(l.Files)}, {"command", len(l.Commands)}, {"error", len(l.Errors)}, {"test", len(l.Tests)},
		{"reference", len(l.Refs)}, {"attachment", len(l.Attachments)}, {"instruction", len(l.Instructions)}, {"approval", len(l.Approvals)}}
	return slices.DeleteFunc(all, func(c count) bool { return c.N == 0 })
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, name, tn, title string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	p := page{Title: title, Tenant: tn, Tenants: h.tenants(tn), Now: h.cfg.Now(), Data: data}
	var b strings.Builder
	if err := pages.ExecuteTemplate(&b, name, p); err != nil {
		h.cfg.Logger.Error("inspector: render", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		return
	}
	_, _ = w.Write([]byte(b.String()))
}

// fail answers an error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if code >= 500 {
		h.cfg.Logger.Warn("inspector", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	}
	w.WriteHeader(code)
	tn := r.URL.Query().Get("tenant")
	if tenant.Check(tn) != nil {
		tn = tenant.Default
	}
	var b strings.Builder
	_ = pages.ExecuteTemplate(&b, "error.html", page{Title: http.StatusText(code), Tenant: tn, Now: h.cfg.Now(), Data: err.Error()})
	_, _ = w.Write([]byte(b.String()))
}

// status is the HTTP status of a use case's error.
func status(err error) int {
	switch {
	case errors.Is(err, session.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, session.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable
}

// plural is n and word, an s added but for one.
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return num(n) + " " + word + "s"
}

// tenantName is how the page names a tenant.
func tenantName(name string) string {
	if name == tenant.Default {
		return "default"
	}
	return name
}

// num writes an integer with thousands separated by commas.
func num(v any) string {
	var s string
	switch n := v.(type) {
	case int:
		s = strconv.Itoa(n)
	case int64:
		s = strconv.FormatInt(n, 10)
	case float64: // a number of an event's data
		s = strconv.FormatInt(int64(n), 10)
	default:
		return fmt.Sprint(v)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// pct is part of whole in whole percent.
func pct(part, whole int) string {
	if whole <= 0 {
		return "–"
	}
	return strconv.Itoa(int(float64(part)*100/float64(whole)+0.5)) + "%"
}

// ago tells a duration the way a person reads an age.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	case d < 48*time.Hour:
		return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + " days"
}

// seqs writes a list of seqs briefly: runs as from–to.
func seqs(s []int64) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(s[i], 10))
		if j > i {
			b.WriteString("–" + strconv.FormatInt(s[j], 10))
		}
		i = j + 1
	}
	return b.String()
}
