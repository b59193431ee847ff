package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/gateway"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/standin"
	"github.com/compactor/compactor/internal/tenant"
)

func chatBody(msgs ...map[string]any) []byte {
	return raw(map[string]any{"model": "gpt-4o", "messages": msgs})
}

func msg(role, text string) map[string]any { return map[string]any{"role": role, "content": text} }

// stored is how many messages the session holds once it holds want (a
// call's messages are appended while it goes upstream), or after a while.
func stored(t *testing.T, c *client.Client, sid string, want int) int {
	t.Helper()
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h, err := c.History(t.Context(), sid)
		if err != nil {
			t.Fatal(err)
		}
		if n = len(h.Messages); n >= want || time.Now().After(deadline) {
			return n
		}
	}
}

// TestRetriedCallAppendsOnce: an SDK's retry sends the same call again;
// the session gets its messages once, and the next turn only its new ones.
func TestRetriedCallAppendsOnce(t *testing.T) {
	s := start(t, 0, 0, nil)
	url := s.url + "/v1/chat/completions"
	q := "What is 2+2? (retried " + nonce() + ")"
	turn1 := chatBody(msg("system", "Be brief."), msg("user", q))
	status, _, sid := post(t, url, nil, turn1)
	if status != 200 || sid == "" {
		t.Fatalf("status %d, session %q", status, sid)
	}
	status, _, again := post(t, url, nil, turn1)
	if status != 200 || again != sid {
		t.Fatalf("the retry: status %d, session %q (was %q)", status, again, sid)
	}
	if n := stored(t, s.c, sid, 1); n != 1 {
		t.Fatalf("after a call and its retry the session holds %d messages, want 1 (the system prompt is not stored)", n)
	}
	turn2 := chatBody(msg("system", "Be brief."), msg("user", q), msg("assistant", "4"), msg("user", "And 3+3?"))
	for range 2 {
		if status, _, got := post(t, url, nil, turn2); status != 200 || got != sid {
			t.Fatalf("turn 2: status %d, session %q", status, got)
		}
	}
	if n := stored(t, s.c, sid, 3); n != 3 {
		t.Fatalf("after turn 2 (sent twice) the session holds %d messages, want 3", n)
	}
}

// TestConversationsKeepTheirSessions: two conversations get two sessions;
// one that shares another's start and then differs goes on in a fork; an
// older turn sent again after a newer one goes upstream as it is.
func TestConversationsKeepTheirSessions(t *testing.T) {
	s := start(t, 0, 0, nil)
	url := s.url + "/v1/chat/completions"
	n := nonce()
	a := []map[string]any{msg("user", "Plan a trip to Lisbon (sessions test "+n+")")}
	_, _, sidA := post(t, url, nil, chatBody(a...))
	_, _, sidB := post(t, url, nil, chatBody(msg("user", "Plan a trip to Porto (sessions test "+n+")")))
	if sidA == sidB {
		t.Fatalf("two conversations share session %s", sidA)
	}
	a2 := append(a, msg("assistant", "Day 1: Alfama."), msg("user", "More museums."))
	if _, _, got := post(t, url, nil, chatBody(a2...)); got != sidA {
		t.Fatalf("turn 2 went to %s, want %s", got, sidA)
	}
	// Another conversation with the same first message: another reply.
	c2 := append(a, msg("assistant", "Day 1: Belém."), msg("user", "Fewer museums."))
	status, _, sidC := post(t, url, nil, chatBody(c2...))
	if status != 200 || sidC == sidA || sidC == "" {
		t.Fatalf("the diverging conversation: status %d, session %q (the first's %q)", status, sidC, sidA)
	}
	c3 := append(c2, msg("assistant", "Then the beach."), msg("user", "Good."))
	if _, _, got := post(t, url, nil, chatBody(c3...)); got != sidC {
		t.Fatalf("the fork's next turn went to %s, want %s", got, sidC)
	}
	if n := stored(t, s.c, sidA, 3); n != 3 {
		t.Fatalf("the first conversation's session holds %d messages, want 3", n)
	}
	if n := stored(t, s.c, sidC, 5); n != 5 {
		t.Fatalf("the fork holds %d messages, want 5", n)
	}
	// An older turn of the first conversation, sent again.
	status, body, _ := post(t, url, nil, chatBody(a...))
	if status != 200 || !strings.Contains(string(body), "chat.completion") {
		t.Fatalf("an older turn: status %d: %s", status, body)
	}
	if n := stored(t, s.c, sidA, 3); n != 3 {
		t.Fatalf("an older turn changed the session: %d messages", n)
	}
}

// TestOverflowCompactsAndRetries: a gateway that believes the window is
// large meets an upstream that refuses the length; it compacts and sends
// the call once more, and the agent never sees the refusal.
func TestOverflowCompactsAndRetries(t *testing.T) {
	for _, api := range []string{"chat", "messages"} {
		t.Run(api, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			// (At 5,000 tokens a compaction may leave no raw tail beside
			// the summary and the reply's room: the last result summarised,
			// the model asks for it again.)
			s := startWith(t, gateway.Config{Window: 200000, Metrics: gateway.NewMetrics(reg)}, 8000, readFiles(20))
			a := newAgent(t, api, s.url, "You read files.", "Read f1.txt to f20.txt (overflow test "+nonce()+").")
			for turn := 0; turn < 40; turn++ {
				status, called := a.turn()
				if status != 200 {
					t.Fatalf("turn %d: status %d", turn, status)
				}
				if !called {
					break
				}
			}
			if a.calls != 20 {
				t.Fatalf("the agent ran %d tools, want 20", a.calls)
			}
			retried := requests(t, reg, api, "overflow_retried")
			if retried == 0 {
				t.Fatal("no call was retried after an overflow")
			}
		})
	}
}

// TestFailOpen: with no service to reach, calls go upstream as they came
// and are counted.
func TestFailOpen(t *testing.T) {
	_, nc, _ := natstest.Start(t)
	c, err := client.New(nc, client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	up, err := standin.Start("127.0.0.1:0", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(gateway.Config{Upstreams: map[string]string{"openai": up.URL, "anthropic": up.URL}, Client: c,
		Metrics: gateway.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, gw)
	body := chatBody(msg("user", "Hello without a service "+nonce()))
	status, answer, _ := post(t, url+"/v1/chat/completions", nil, body)
	if status != 200 || !strings.Contains(string(answer), "chat.completion") {
		t.Fatalf("status %d: %s", status, answer)
	}
	if calls := up.Calls(); len(calls) != 1 || string(calls[0].Body) != string(body) {
		t.Fatalf("the upstream got %d calls, want the call as it came", len(calls))
	}
	if n := requests(t, reg, "chat", "fail_open"); n != 1 {
		t.Fatalf("fail_open counted %v", n)
	}
}

// TestTenantKeys: with keys configured a call must name one, by header or
// in the base URL's path; the error is the API's own shape.
func TestTenantKeys(t *testing.T) {
	s := start(t, 0, 0, nil)
	gw, err := gateway.New(gateway.Config{Upstreams: map[string]string{"openai": s.up.URL, "anthropic": s.up.URL},
		Tenants: map[string]*client.Client{"key-one": s.c}})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, gw)
	body := chatBody(msg("user", "Hello tenant"))
	status, answer, _ := post(t, url+"/v1/chat/completions", nil, body)
	var e struct {
		Error struct{ Type, Message string } `json:"error"`
	}
	if status != http.StatusUnauthorized || json.Unmarshal(answer, &e) != nil || e.Error.Type != "authentication_error" {
		t.Fatalf("without a key: %d %s", status, answer)
	}
	status, answer, _ = post(t, url+"/v1/messages", nil, raw(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 10,
		"messages": []any{msg("user", "hi")}}))
	var ae struct {
		Type  string                `json:"type"`
		Error struct{ Type string } `json:"error"`
	}
	if status != http.StatusUnauthorized || json.Unmarshal(answer, &ae) != nil || ae.Type != "error" || ae.Error.Type != "authentication_error" {
		t.Fatalf("Anthropic without a key: %d %s", status, answer)
	}
	if status, answer, _ = post(t, url+"/v1/chat/completions", http.Header{gateway.HeaderKey: {"key-one"}}, body); status != 200 {
		t.Fatalf("with the key's header: %d %s", status, answer)
	}
	if status, answer, _ = post(t, url+"/k/key-one/v1/chat/completions", nil, body); status != 200 {
		t.Fatalf("with the key in the path: %d %s", status, answer)
	}
	for _, c := range s.up.Calls() {
		if c.Header.Get(gateway.HeaderKey) != "" {
			t.Fatal("the gateway key went upstream")
		}
	}
}

// TestBadInput: malformed calls get the API's error body and store
// nothing; the upstream's own errors pass unchanged.
func TestBadInput(t *testing.T) {
	s := start(t, 0, 0, nil)
	cases := []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":`, `"invalid_request_error"`},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":"hi"}`, `messages: an array of messages is required`},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"wizard","content":"x"}]}`, `role \"wizard\"`},
		{"/v1/responses", `{"model":"gpt-4o","input":[{"type":"function_call_output","output":"x"}]}`, `needs call_id`},
		{"/v1/messages", `[1,2]`, `"type":"error"`},
		{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, `needs tool_use_id`},
	}
	for _, c := range cases {
		status, answer, _ := post(t, s.url+c.path, nil, []byte(c.body))
		if status != 400 || !strings.Contains(string(answer), c.want) {
			t.Errorf("%s %s: %d %s, want 400 with %s", c.path, c.body, status, answer, c.want)
		}
	}
	if n := len(s.up.Calls()); n != 0 {
		t.Fatalf("%d malformed calls went upstream", n)
	}
	// The upstream's own refusal (no max_tokens) passes as it is.
	status, answer, _ := post(t, s.url+"/v1/messages", nil, []byte(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi (bad input)"}]}`))
	if status != 400 || !strings.Contains(string(answer), "max_tokens: Field required") {
		t.Fatalf("the upstream's error: %d %s", status, answer)
	}
	// Other paths are forwarded.
	resp, err := http.Get(s.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models: %d", resp.StatusCode)
	}
}

// requests reads compactor_gateway_requests_total{api, upstream}.
func requests(t *testing.T, reg *prometheus.Registry, api, upstream string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "compactor_gateway_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["api"] == api && labels["upstream"] == upstream {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// nonce makes a test's conversations its own when the tests run again
// against the same service (-count).
func nonce() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// TestQuotasApply: a tenant over its quota of sessions gets the API's
// 429 for a new conversation, and the call does not go upstream.
func TestQuotasApply(t *testing.T) {
	s := start(t, 0, 0, nil)
	svc.SetTenants(nil, map[string]tenant.Limits{tenant.Default: {Sessions: 1}})
	t.Cleanup(func() { svc.SetTenants(nil, nil) })
	var status int
	var answer []byte
	upstream := 0
	// Until the quota counts the sessions stored before it was set (the
	// usage scan), a call may still go through: the one refused must not.
	natstest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		before := len(s.up.Calls())
		status, answer, _ = post(t, s.url+"/v1/messages", nil, raw(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 10,
			"messages": []any{msg("user", "a new conversation over the quota "+nonce())}}))
		if status != http.StatusTooManyRequests {
			return fmt.Errorf("status %d: %s", status, answer)
		}
		upstream = len(s.up.Calls()) - before
		return nil
	})
	var e struct {
		Type  string                         `json:"type"`
		Error struct{ Type, Message string } `json:"error"`
	}
	if json.Unmarshal(answer, &e) != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" || !strings.Contains(e.Error.Message, "quota") {
		t.Fatalf("over the quota: %s", answer)
	}
	if upstream != 0 {
		t.Fatalf("the call refused over the quota went upstream (%d calls)", upstream)
	}
}
