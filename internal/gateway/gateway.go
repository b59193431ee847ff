// Package gateway is `compactor gateway`: an HTTP server that speaks the
// provider APIs agents use (OpenAI Chat Completions and Responses,
// Anthropic Messages, streamed or not) and forwards each call to the
// upstream with the caller's own key. It is a runtime of the service,
// through the public Go client: it keeps a session per conversation
// (appending only what the runtime's resent list adds), and when the
// session is over its window it sends the compacted context upstream
// instead of the runtime's whole list.
package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tokens"
)

// Headers a runtime may send the gateway (they do not go upstream).
const (
	// HeaderSession names the session explicitly.
	HeaderSession = "X-Compactor-Session"
	// HeaderKey is the gateway key that says the tenant (or the path
	// prefix /k/{key}/).
	HeaderKey = "X-Compactor-Key"
)

// Config configures a Gateway.
type Config struct {
	// Upstreams are the providers' base URLs, by provider ("openai",
	// "anthropic"): a path such as /v1/chat/completions is added to it.
	Upstreams map[string]string
	// Client is the service's client when there are no keys; Tenants the
	// client of each gateway key's tenant (a request must then name one).
	Client  *client.Client
	Tenants map[string]*client.Client
	// Window, when set, is every model's context window; else the model
	// table's (Models), and DefaultWindow for a model it does not know.
	Window int
	Models *models.Table
	// MaxBody bounds a request body (default 32 MiB).
	MaxBody int64
	// HTTP is the upstream's client (default: one without a timeout, for
	// long streams).
	HTTP    *http.Client
	Logger  *slog.Logger
	Metrics *Metrics
	// Sessions bounds the sessions whose state the gateway keeps (default
	// 10,000); the others are read again from the service when they come.
	Sessions int
	// ElementBytes bounds the conversations' elements whose reading the
	// gateway keeps, in their bytes (default 64 MiB): a turn reads only
	// what it adds.
	ElementBytes int
}

// DefaultWindow is the window of a model the table does not know.
const DefaultWindow = 128000

// Gateway serves the provider APIs.
type Gateway struct {
	cfg    Config
	states *states
	// learned are the windows upstreams' refusals named, by model.
	learned sync.Map
	// elements are the elements read lately.
	elements *elementCache
	http     *http.Client
	log      *slog.Logger
	m        *Metrics
}

// New returns a gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Client == nil && len(cfg.Tenants) == 0 {
		return nil, errors.New("gateway: a client (or tenants) is needed")
	}
	for _, p := range []string{"openai", "anthropic"} {
		u := strings.TrimRight(cfg.Upstreams[p], "/")
		if u == "" {
			return nil, fmt.Errorf("gateway: no %s upstream", p)
		}
		cfg.Upstreams[p] = u
	}
	if cfg.Models == nil {
		cfg.Models = models.Default()
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 32 << 20
	}
	if cfg.Sessions <= 0 {
		cfg.Sessions = 10000
	}
	if cfg.ElementBytes <= 0 {
		cfg.ElementBytes = 64 << 20
	}
	g := &Gateway{cfg: cfg, states: newStates(cfg.Sessions), http: cfg.HTTP, log: cfg.Logger, m: cfg.Metrics,
		elements: newElementCache(cfg.ElementBytes)}
	if g.http == nil {
		g.http = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 256,
			IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 0, ForceAttemptHTTP2: true}}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.m == nil {
		g.m = NewMetrics(nil)
	}
	return g, nil
}

// ServeHTTP routes a call: the three APIs the gateway understands, and
// any other path of a provider (models, token counts) forwarded as is.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, key := r.URL.Path, r.Header.Get(HeaderKey)
	if rest, ok := strings.CutPrefix(path, "/k/"); ok {
		key, path, _ = strings.Cut(rest, "/")
		path = "/" + path
	}
	a := apiFor(path, r.Header)
	tenant, cl, ok := g.tenant(key)
	if !ok {
		g.fail(w, a, http.StatusUnauthorized, "compactor gateway: a gateway key is required ("+HeaderKey+" header or /k/{key}/ in the base URL)")
		return
	}
	if !a.parses() || r.Method != http.MethodPost {
		g.m.request(a.name, "passthrough")
		g.forward(w, r, a, path, "", nil, nil)
		return
	}
	g.serveAPI(w, r, a, path, tenant, cl)
}

// apiFor is the API of a path; any other path goes to the provider its
// headers name (Anthropic's send anthropic-version or x-api-key).
func apiFor(path string, h http.Header) *api {
	for _, a := range apis {
		if path == a.path || path == strings.TrimPrefix(a.path, "/v1") {
			return a
		}
	}
	if strings.HasPrefix(path, "/v1/messages") || h.Get("anthropic-version") != "" || h.Get("x-api-key") != "" {
		return &api{name: "other", provider: "anthropic", errorBody: anthropicError}
	}
	return &api{name: "other", provider: "openai", errorBody: openAIError}
}

// tenant is the key's tenant and client.
func (g *Gateway) tenant(key string) (string, *client.Client, bool) {
	if len(g.cfg.Tenants) == 0 {
		return "", g.cfg.Client, true
	}
	c, ok := g.cfg.Tenants[key]
	if !ok {
		return "", nil, false
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8]), c, true
}

// fail answers an error in the API's shape.
func (g *Gateway) fail(w http.ResponseWriter, a *api, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(a.errorBody(status, errorKind(status), msg))
}

// serveAPI serves one call of an API it understands.
func (g *Gateway) serveAPI(w http.ResponseWriter, r *http.Request, a *api, path, tenant string, cl *client.Client) {
	start := time.Now()
	ctx, span := telemetry.Tracer().Start(withStart(r.Context(), start), "gateway "+a.name, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	if err != nil {
		status := http.StatusBadRequest
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		g.fail(w, a, status, "compactor gateway: reading the body: "+err.Error())
		return
	}
	c, err := a.read(body, g.elements)
	if err != nil {
		g.m.request(a.name, "invalid")
		g.fail(w, a, http.StatusBadRequest, "compactor gateway: "+err.Error())
		return
	}
	span.SetAttributes(attribute.String("gen_ai.request.model", c.model))
	if c.asIs != "" || len(c.msgs) == 0 {
		g.m.request(a.name, cmp.Or(c.asIs, "passthrough"))
		g.forward(w, r.WithContext(ctx), a, path, c.model, body, nil)
		return
	}
	t := &turn{g: g, a: a, c: c, cl: cl, tenant: tenant, sid: r.Header.Get(HeaderSession), start: start, original: body}
	if t.sid != "" {
		if err := checkSessionHeader(t.sid); err != nil {
			g.fail(w, a, http.StatusBadRequest, "compactor gateway: "+HeaderSession+": "+err.Error())
			return
		}
	} else {
		t.sid = sessionID(c.key, c)
	}
	span.SetAttributes(attribute.String("compactor.session_id", t.sid))
	out, err := t.prepare(ctx, false)
	if err != nil {
		if errors.Is(err, client.ErrQuotaExceeded) {
			var ce *client.Error
			if errors.As(err, &ce) && ce.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ce.RetryAfter.Seconds()))))
			}
			g.m.request(a.name, "quota")
			g.fail(w, a, http.StatusTooManyRequests, "compactor gateway: the tenant's quota: "+err.Error())
			return
		}
		g.m.request(a.name, t.failOpen(ctx, err))
		w.Header().Set(HeaderSession, t.sid)
		g.forward(w, r.WithContext(ctx), a, path, c.model, body, nil)
		return
	}
	w.Header().Set(HeaderSession, t.sid)
	g.forward(w, r.WithContext(ctx), a, path, c.model, out, t.retry)
}

// turn is one call being served.
type turn struct {
	g        *Gateway
	a        *api
	c        *conv
	cl       *client.Client
	tenant   string
	sid      string
	start    time.Time
	original []byte
	// compacted: what goes upstream is the compacted context; sent its
	// tokens (the gateway's count).
	compacted bool
	sent      int
}

// failOpen logs why the call goes upstream as it came, and names the
// reason for the metric.
func (t *turn) failOpen(ctx context.Context, err error) string {
	if errors.Is(err, errBehind) {
		return "behind"
	}
	t.g.log.WarnContext(ctx, "gateway: forwarding the call as it came", "api", t.a.name, "session_id", t.sid, "error", err)
	return "fail_open"
}

// prepare stores the call's new messages and returns the body to send:
// the runtime's own when the session fits its window, the compacted
// context when it does not (compacting first when over it, or when
// overflow says the upstream refused it).
func (t *turn) prepare(ctx context.Context, overflow bool) ([]byte, error) {
	g, c := t.g, t.c
	window := g.window(c.model)
	counter, err := tokens.ForModel(c.model)
	if err != nil {
		return nil, err
	}
	st := g.states.get(t.tenant, t.sid)
	st.mu.Lock()
	overhead := st.overheadTokens(counter, c)
	reserve := g.reserve(c, window)
	limit := max(window-reserve-overhead, window/4)
	sy := syncer{c: t.cl, limit: limit, model: c.model, counter: counter}
	if !overflow && st.extends(c) {
		items := st.items(c)
		if est := st.estimate(sy, c, items); est <= limit {
			t.hint(ctx, st, sy, est)
			// Nothing to compact: the call goes upstream now, and its new
			// messages are appended meanwhile, before the session's next
			// call is served (it waits for the lock).
			out, err := t.body(st, sy, items, overhead)
			if err == nil {
				t.sid = st.sid
				go func() {
					defer st.mu.Unlock()
					actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
					defer cancel()
					if err := st.appendNew(actx, sy, c); err != nil {
						g.log.WarnContext(ctx, "gateway: appending the call's messages", "session_id", st.sid, "error", err)
					}
				}()
				return out, nil
			}
		}
	}
	st, err = g.sync(ctx, sy, t.tenant, st, c)
	defer st.mu.Unlock()
	t.sid = st.sid
	if err != nil {
		return nil, err
	}
	items := st.items(c)
	est := st.estimate(sy, c, items)
	if overflow || est > limit {
		if err := t.compact(ctx, sy, st, est, overflow); err != nil {
			return nil, err
		}
		items = st.items(c)
	}
	return t.body(st, sy, items, overhead)
}

// NearShare is the share of its limit at which the gateway tells the
// service that a session nears it (a ContextNearBudget), once per
// compaction in force: the service prepares the compaction the call over
// the limit will commit.
const NearShare = 0.75

// hint sends the session's ContextNearBudget when its estimate passes
// NearShare of the limit, in the background.
func (t *turn) hint(ctx context.Context, st *state, sy syncer, est int) {
	base := ""
	if st.view != nil {
		base = st.view.compaction
	}
	if float64(est) < NearShare*float64(sy.limit) || st.hinted == base+"\x00"+st.sid {
		return
	}
	st.hinted = base + "\x00" + st.sid
	sum := sha256.Sum256([]byte(st.sid + "\x00near\x00" + base))
	req := client.CompactRequest{RequestID: "gw-" + hex.EncodeToString(sum[:16]), Model: sy.model, ContextLimit: sy.limit,
		RequestedTokens: est, MessageCount: len(t.c.msgs)}
	req.TraceParent, req.TraceState = telemetry.Inject(ctx)
	go func() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := t.cl.NearBudget(hctx, st.sid, req); err != nil {
			t.g.log.WarnContext(ctx, "gateway: ContextNearBudget", "session_id", st.sid, "error", err)
		}
	}()
}

// body is what goes upstream for items: the runtime's own body when
// nothing is compacted, else the compacted context.
func (t *turn) body(st *state, sy syncer, items []item, overhead int) ([]byte, error) {
	c := t.c
	t.sent = st.estimate(sy, c, items) + overhead
	if st.view == nil {
		t.g.m.request(t.a.name, "raw")
		return t.original, nil
	}
	elems, err := c.render(items)
	if err != nil {
		return nil, err
	}
	t.compacted = true
	t.g.m.request(t.a.name, "compacted")
	t.g.m.saved(st.estimate(sy, c, nil) + overhead - t.sent)
	return c.body(elems)
}

// window is the model's context window: configured, or from the model
// table, and no more than an upstream's refusal said.
func (g *Gateway) window(model string) int {
	w := DefaultWindow
	if g.cfg.Window > 0 {
		w = g.cfg.Window
	} else if info := g.cfg.Models.Lookup(model); info.Known {
		w = info.ContextWindow
	}
	if n, ok := g.learned.Load(model); ok {
		w = min(w, n.(int))
	}
	return w
}

// windowRe finds the window in a provider's refusal: OpenAI's "maximum
// context length is N tokens", Anthropic's "N tokens > M maximum".
var windowRe = regexp.MustCompile(`maximum context length is (\d+)|> (\d+) maximum`)

// windowIn is the window a refusal names (0: none).
func windowIn(body []byte) int {
	m := windowRe.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]) + string(m[2]))
	return n
}

// reserve is the room a call leaves for the reply: what it asks for (else
// the model's most, else an eighth of the window), at most a quarter of
// the window, and at least a twentieth (the upstream's tokenizer may count
// more than the gateway's).
func (g *Gateway) reserve(c *conv, window int) int {
	r := c.maxOutput
	if r <= 0 {
		if info := g.cfg.Models.Lookup(c.model); info.Known && g.cfg.Window == 0 {
			r = info.MaxOutput
		} else {
			r = window / 8
		}
	}
	return max(min(r, window/4), window/20)
}

// overheadTokens counts what every call carries besides its messages.
func (st *state) overheadTokens(counter *tokens.Counter, c *conv) int {
	k := sha256.Sum256(c.overhead)
	if k != st.overheadKey {
		st.overheadKey, st.overhead = k, counter.Count(string(c.overhead))
	}
	return st.overhead
}

// items is what goes upstream for c: the compaction in force's items and
// the messages after it.
func (st *state) items(c *conv) []item {
	n := len(c.msgs)
	var out []item
	from := 0
	if st.view != nil {
		for _, it := range st.view.items {
			if it.summary == "" && it.msg >= n {
				break
			}
			if it.placeholder == c.msgs[it.msg].Content.Text {
				it.placeholder = "" // not cleared
			}
			out = append(out, it)
		}
		from = st.view.head
	}
	for i := from; i < n; i++ {
		out = append(out, item{msg: i})
	}
	return out
}

// estimate counts the session's part of items (nil: every message).
func (st *state) estimate(sy syncer, c *conv, items []item) int {
	n := tokens.ReplyPriming()
	if items == nil {
		for i := range c.msgs {
			n += st.count(sy, c, i)
		}
		return n
	}
	for _, it := range items {
		switch {
		case it.summary != "":
			n += sy.counter.Count(it.summary) + 8
		case it.placeholder != "":
			n += sy.counter.Count(it.placeholder) + 8
		default:
			n += st.count(sy, c, it.msg)
		}
	}
	return n
}

// compact asks the service to compact the session and reads its context
// after.
func (t *turn) compact(ctx context.Context, sy syncer, st *state, est int, overflow bool) error {
	trigger := client.OverBudget
	if overflow {
		trigger = client.Overflow
	}
	sum := sha256.Sum256([]byte(st.sid + "\x00" + st.lastID + "\x00" + string(trigger)))
	req := client.CompactRequest{RequestID: "gw-" + hex.EncodeToString(sum[:16]), Trigger: trigger, Model: sy.model,
		ContextLimit: sy.limit, RequestedTokens: est, MessageCount: len(t.c.msgs)}
	if overflow {
		req.Provider = t.a.provider
	}
	req.TraceParent, req.TraceState = telemetry.Inject(ctx)
	res, err := t.cl.CompactSync(ctx, st.sid, req)
	if err != nil {
		return err
	}
	t.g.m.compaction(res.Strategy, string(res.Outcome))
	t.g.log.InfoContext(ctx, "gateway: compaction", "session_id", st.sid, "outcome", res.Outcome, "strategy", res.Strategy,
		"tokens_before", res.TokensBefore, "tokens_after", res.TokensAfter, "duration_ms", res.DurationMS)
	v, err := t.cl.Context(ctx, st.sid)
	if err != nil {
		return err
	}
	st.setView(v)
	return nil
}

// retry is asked when the upstream refused the call for its length: it
// learns the model's window from the refusal (or takes three quarters of
// what was sent) and returns the body to send once more, compacted (nil:
// none).
func (t *turn) retry(ctx context.Context, refusal []byte) []byte {
	n := windowIn(refusal)
	if n <= 0 {
		n = t.sent * 3 / 4
	}
	if n > 0 {
		t.g.learned.Store(t.c.model, n)
	}
	out, err := t.prepare(ctx, true)
	if err != nil {
		t.g.log.WarnContext(ctx, "gateway: no compaction after the upstream's overflow", "session_id", t.sid, "error", err)
		return nil
	}
	t.g.m.request(t.a.name, "overflow_retried")
	return out
}
