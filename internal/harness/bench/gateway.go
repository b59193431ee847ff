package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/gateway"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/standin"
	"github.com/compactor/compactor/internal/tokens"
)

// GatewayConfig sizes the gateway benchmark.
type GatewayConfig struct {
	// Conversations run at once, each Turns turns, for the latency.
	Conversations, Turns int
	// ModelDelay is the stand-in's time to its first byte.
	ModelDelay time.Duration
	// Steps of the agent replay, at StepDelay a model call, against a
	// summary model of SummaryDelay a call, in Window tokens.
	Steps                   int
	StepDelay, SummaryDelay time.Duration
	Window                  int
}

// DefaultGatewayConfig is make gateway's run.
func DefaultGatewayConfig() GatewayConfig {
	return GatewayConfig{Conversations: 8, Turns: 120, ModelDelay: 20 * time.Millisecond,
		Steps: 60, StepDelay: 500 * time.Millisecond, SummaryDelay: 2 * time.Second, Window: 16000}
}

// GatewayReport is what the gateway benchmark measured.
type GatewayReport struct {
	Config GatewayConfig `json:"config"`
	// Direct and Through are whole calls (not streamed) to the stand-in
	// and through the gateway, interleaved in one run; Added the
	// differences of their percentiles.
	Direct   Quantiles `json:"direct"`
	Through  Quantiles `json:"through"`
	AddedP50 float64   `json:"added_p50_ms"`
	AddedP99 float64   `json:"added_p99_ms"`
	// TTFB: the first streamed byte, direct and through the gateway.
	DirectTTFB  Quantiles `json:"direct_ttfb"`
	ThroughTTFB Quantiles `json:"through_ttfb"`
	TTFBRatio   float64   `json:"ttfb_p50_ratio"`
	// Replay is the agent replay past its window.
	Replay GatewayReplay `json:"replay"`
}

// GatewayReplay is one agent, of the Anthropic API, streamed, at a real
// agent's pace past its window.
type GatewayReplay struct {
	Steps        int     `json:"steps"`
	Calls        int     `json:"upstream_calls"`
	MaxTokens    int     `json:"max_upstream_tokens"`
	OverWindow   int     `json:"over_window"`
	Compactions  int     `json:"compactions"`
	FromPrepared int     `json:"from_preparation"`
	PreparedPct  float64 `json:"from_preparation_pct"`
	// NoModel counts the compactions that made no model call on the
	// turn: from a preparation, or clearing old tool results only.
	NoModel  int  `json:"no_model_call"`
	Stored   bool `json:"stored_equals_sent"`
	Finished bool `json:"finished"`
	// Blocked is the p95 of the turns that waited on a compaction.
	CompactedTurnP95 float64 `json:"compacted_turn_p95_ms"`
}

// NoModelPct is the share of compactions whose turn waited on no model.
func (r GatewayReplay) NoModelPct() float64 {
	if r.Compactions == 0 {
		return 0
	}
	return 100 * float64(r.NoModel) / float64(r.Compactions)
}

// RunGateway measures the gateway: its added latency against calling the
// stand-in directly (no compaction due), the time to the first streamed
// byte, and an agent's replay past its window.
func RunGateway(ctx context.Context, cfg GatewayConfig) (GatewayReport, error) {
	rep := GatewayReport{Config: cfg}
	env, err := startGatewayEnv(ctx, cfg.SummaryDelay, 0)
	if err != nil {
		return rep, err
	}
	defer env.close()
	env.up.Delay = cfg.ModelDelay
	if err := env.latency(ctx, cfg, &rep); err != nil {
		return rep, err
	}
	env.close()
	if env, err = startGatewayEnv(ctx, cfg.SummaryDelay, cfg.Window); err != nil {
		return rep, err
	}
	defer env.close()
	env.up.Delay = cfg.StepDelay
	rep.Replay, err = env.replay(ctx, cfg)
	return rep, err
}

// gatewayEnv is a service, a stand-in upstream and a gateway, each as it
// runs: the service on its own NATS server, the gateway over loopback HTTP.
type gatewayEnv struct {
	svc  *app.App
	dir  string
	nc   *nats.Conn
	c    *client.Client
	up   *standin.Server
	url  string
	srv  *http.Server
	reg  *prometheus.Registry
	once sync.Once
}

func startGatewayEnv(ctx context.Context, summaryDelay time.Duration, window int) (*gatewayEnv, error) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "compactor-gateway-bench")
	if err != nil {
		return nil, err
	}
	e := &gatewayEnv{dir: dir, reg: prometheus.NewRegistry()}
	e.svc, err = app.Start(ctx, app.Config{Provision: true, Embedded: embedded.Options{Port: -1, DataDir: dir},
		Pipeline: pipeline.DefaultConfig(), Summarizer: &slowSummarizer{next: extractive.New(counter), delay: summaryDelay}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if e.nc, err = nats.Connect(e.svc.URL); err != nil {
		e.close()
		return nil, err
	}
	if e.c, err = client.New(e.nc, client.WithTimeout(2*time.Minute)); err != nil {
		e.close()
		return nil, err
	}
	if e.up, err = standin.Start("127.0.0.1:0", window, standin.Steps(1<<30, `{"path":"notes.txt"}`)); err != nil {
		e.close()
		return nil, err
	}
	gw, err := gateway.New(gateway.Config{Upstreams: map[string]string{"openai": e.up.URL, "anthropic": e.up.URL}, Client: e.c,
		Window: window, Metrics: gateway.NewMetrics(e.reg)})
	if err != nil {
		e.close()
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.close()
		return nil, err
	}
	e.url = "http://" + l.Addr().String()
	e.srv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(l) }()
	return e, nil
}

func (e *gatewayEnv) close() {
	e.once.Do(func() {
		if e.srv != nil {
			_ = e.srv.Close()
		}
		if e.up != nil {
			e.up.Close()
		}
		if e.nc != nil {
			e.nc.Close()
		}
		if e.svc != nil {
			_ = e.svc.Stop()
		}
		os.RemoveAll(e.dir)
	})
}

// slowSummarizer is a summary model that takes delay a call.
type slowSummarizer struct {
	next  pipeline.Summarizer
	delay time.Duration
}

func (s *slowSummarizer) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return pipeline.SummaryResponse{}, ctx.Err()
	}
	return s.next.Summarize(ctx, r)
}

// latency runs conversations of plain chat turns (no tools, far below the
// window), each turn sent to the stand-in and through the gateway in turn,
// whole and streamed.
func (e *gatewayEnv) latency(ctx context.Context, cfg GatewayConfig, rep *GatewayReport) error {
	var mu sync.Mutex
	var direct, through, directTTFB, throughTTFB []time.Duration
	errs := make(chan error, cfg.Conversations)
	var wg sync.WaitGroup
	for conv := range cfg.Conversations {
		wg.Go(func() {
			msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant."}}
			for turn := range cfg.Turns {
				msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("conversation %d, turn %d: %s", conv, turn, filler(turn))})
				stream := turn%2 == 1
				body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs, "stream": stream})
				var d [2]time.Duration
				var first [2]time.Duration
				var reply string
				order := []string{e.up.URL, e.url}
				if turn%4 >= 2 { // alternate which goes first
					order = []string{e.url, e.up.URL}
				}
				for _, base := range order {
					total, ttfb, text, err := timedCall(ctx, base+"/v1/chat/completions", body)
					if err != nil {
						errs <- err
						return
					}
					k := 0
					if base == e.url {
						k, reply = 1, text
					}
					d[k], first[k] = total, ttfb
				}
				mu.Lock()
				if stream {
					directTTFB, throughTTFB = append(directTTFB, first[0]), append(throughTTFB, first[1])
				} else {
					direct, through = append(direct, d[0]), append(through, d[1])
				}
				mu.Unlock()
				msgs = append(msgs, map[string]any{"role": "assistant", "content": reply})
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	rep.Direct, rep.Through = quantiles(direct), quantiles(through)
	rep.AddedP50, rep.AddedP99 = rep.Through.P50-rep.Direct.P50, rep.Through.P99-rep.Direct.P99
	rep.DirectTTFB, rep.ThroughTTFB = quantiles(directTTFB), quantiles(throughTTFB)
	if rep.DirectTTFB.P50 > 0 {
		rep.TTFBRatio = rep.ThroughTTFB.P50 / rep.DirectTTFB.P50
	}
	return nil
}

// filler is some 60 words of a user's message.
func filler(turn int) string {
	words := strings.Fields("please look at the build logs again and tell me which of the failing tests were fixed by the change to the parser and which still fail because of the timeout in the network layer we discussed yesterday with the team")
	var b strings.Builder
	for i := range 60 {
		b.WriteString(words[(i+turn)%len(words)])
		b.WriteByte(' ')
	}
	return b.String()
}

// timedCall posts body and reads the answer: its duration, the time to its
// first byte, and the assistant's text (of a whole or streamed answer).
func timedCall(ctx context.Context, url string, body []byte) (total, ttfb time.Duration, text string, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		return 0, 0, "", fmt.Errorf("%s: %w", url, err)
	}
	ttfb = time.Since(start)
	b, err := io.ReadAll(br)
	total = time.Since(start)
	if err != nil {
		return 0, 0, "", err
	}
	if resp.StatusCode != 200 {
		return 0, 0, "", fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return total, ttfb, replyText(b), nil
}

// replyText is a chat answer's text, whole or streamed.
func replyText(b []byte) string {
	var whole struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &whole) == nil && len(whole.Choices) > 0 {
		return whole.Choices[0].Message.Content
	}
	var out strings.Builder
	for line := range strings.SplitSeq(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) == nil && len(chunk.Choices) > 0 {
			out.WriteString(chunk.Choices[0].Delta.Content)
		}
	}
	return out.String()
}

// replay runs one agent of the Anthropic API, streamed, through the
// gateway: cfg.Steps tool calls of some 600 tokens each, the model taking
// cfg.StepDelay a call, in a window of cfg.Window tokens.
func (e *gatewayEnv) replay(ctx context.Context, cfg GatewayConfig) (GatewayReplay, error) {
	out := GatewayReplay{Steps: cfg.Steps}
	e.up.SetScript(standin.Steps(cfg.Steps, `{"path":"notes.txt"}`))
	sid := "gw-bench-replay"
	tools := []any{map[string]any{"name": "read_file", "description": "Read a file",
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}}
	msgs := []any{map[string]any{"role": "user", "content": fmt.Sprintf("Read notes.txt %d times and sum up what changed.", cfg.Steps)}}
	var compactedTurns []time.Duration
	results := 0
	for turn := 0; turn < 3*cfg.Steps; turn++ {
		before := gatewayCompactions(e.reg)
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 2048, "system": "You read files.",
			"tools": tools, "messages": msgs, "stream": true})
		start := time.Now()
		content, stop, err := streamMessage(ctx, e.url+"/v1/messages", sid, body)
		if err != nil {
			return out, fmt.Errorf("replay turn %d: %w", turn, err)
		}
		if gatewayCompactions(e.reg) > before {
			compactedTurns = append(compactedTurns, time.Since(start))
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": content})
		if stop != "tool_use" {
			out.Finished = true
			break
		}
		var res []any
		for _, b := range content {
			if m, ok := b.(map[string]any); ok && m["type"] == "tool_use" {
				results++
				res = append(res, map[string]any{"type": "tool_result", "tool_use_id": m["id"], "content": toolOutput(results)})
			}
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": res})
	}
	for _, c := range e.up.Calls() {
		out.Calls++
		out.MaxTokens = max(out.MaxTokens, c.Tokens)
		if c.Refused {
			out.OverWindow++
		}
	}
	out.countCompactions(e.reg)
	out.CompactedTurnP95 = quantile(compactedTurns, 0.95)
	// (The last call's messages are appended while it goes upstream.)
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if out.Stored, err = storedEquals(ctx, e.c, sid, results); err != nil || out.Stored || time.Now().After(deadline) {
			return out, err
		}
	}
}

// countCompactions reads the gateway's compactions by strategy.
func (out *GatewayReplay) countCompactions(reg *prometheus.Registry) {
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() != "compactor_gateway_compactions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			n := int(m.GetCounter().GetValue())
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] != string(client.OutcomeCompacted) {
				continue
			}
			out.Compactions += n
			switch labels["strategy"] {
			case client.StrategyPrepared:
				out.FromPrepared += n
				out.NoModel += n
			case client.StrategyCleared:
				out.NoModel += n
			}
		}
	}
	if out.Compactions > 0 {
		out.PreparedPct = 100 * float64(out.FromPrepared) / float64(out.Compactions)
	}
}

// storedEquals reports whether the session holds the replay's messages:
// seqs in order, and every tool result, once, as sent.
func storedEquals(ctx context.Context, c *client.Client, sid string, results int) (bool, error) {
	h, err := c.History(ctx, sid)
	if err != nil {
		return false, err
	}
	stored, ok := 0, true
	for i, m := range h.Messages {
		if m.Seq != int64(i+1) {
			ok = false
		}
		if m.Role == client.Tool {
			stored++
			if m.Content.Text != toolOutput(stored) {
				ok = false
			}
		}
	}
	return ok && stored == results, nil
}

// toolOutput is a tool's output of about 600 tokens, its own each step.
func toolOutput(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "notes.txt, read %d:\n", n)
	for i := range 60 {
		fmt.Fprintf(&b, "line %d of read %d: setting_%d_%d = %d\n", i, n, n, i, n*i)
	}
	return b.String()
}

// gatewayCompactions counts the compactions the gateway asked for.
func gatewayCompactions(reg *prometheus.Registry) float64 {
	fams, _ := reg.Gather()
	n := 0.0
	for _, f := range fams {
		if f.GetName() == "compactor_gateway_compactions_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// streamMessage makes one streamed Messages call and puts its content
// blocks together.
func streamMessage(ctx context.Context, url, sid string, body []byte) ([]any, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "sk-ant-bench")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set(gateway.HeaderSession, sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, "", fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	var content []any
	var args []string
	stop := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type         string          `json:"type"`
			Index        int             `json:"index"`
			ContentBlock map[string]any  `json:"content_block"`
			Delta        json.RawMessage `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return nil, "", err
		}
		var d struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			StopReason  string `json:"stop_reason"`
		}
		_ = json.Unmarshal(ev.Delta, &d)
		switch ev.Type {
		case "content_block_start":
			content, args = append(content, ev.ContentBlock), append(args, "")
		case "content_block_delta":
			if d.Type == "text_delta" {
				content[ev.Index].(map[string]any)["text"] = content[ev.Index].(map[string]any)["text"].(string) + d.Text
			} else {
				args[ev.Index] += d.PartialJSON
			}
		case "content_block_stop":
			if b := content[ev.Index].(map[string]any); b["type"] == "tool_use" {
				b["input"] = json.RawMessage(args[ev.Index])
			}
		case "message_delta":
			stop = d.StopReason
		}
	}
	return content, stop, sc.Err()
}

// The gateway's goals (issue 47).
const (
	gatewayGoalP50      = 3.0
	gatewayGoalP99      = 15.0
	gatewayGoalTTFB     = 1.1
	gatewayGoalPrepared = 90.0
)

// Missed lists the goals the report misses.
func (r GatewayReport) Missed() []string {
	var out []string
	if r.AddedP50 > gatewayGoalP50 {
		out = append(out, fmt.Sprintf("added p50 %.2f ms > %.0f ms", r.AddedP50, gatewayGoalP50))
	}
	if r.AddedP99 > gatewayGoalP99 {
		out = append(out, fmt.Sprintf("added p99 %.2f ms > %.0f ms", r.AddedP99, gatewayGoalP99))
	}
	if r.TTFBRatio > gatewayGoalTTFB {
		out = append(out, fmt.Sprintf("first streamed byte %.2fx > %.1fx", r.TTFBRatio, gatewayGoalTTFB))
	}
	rp := r.Replay
	if rp.OverWindow > 0 || !rp.Finished || !rp.Stored {
		out = append(out, fmt.Sprintf("replay: %d calls over the window, finished %v, stored equals sent %v", rp.OverWindow, rp.Finished, rp.Stored))
	}
	if pct := rp.NoModelPct(); pct < gatewayGoalPrepared {
		out = append(out, fmt.Sprintf("replay: %.0f%% of compactions with no model call on the turn < %.0f%%", pct, gatewayGoalPrepared))
	}
	return out
}

// Markdown is the report as docs/GATEWAY.md.
func (r GatewayReport) Markdown(command string) string {
	var b strings.Builder
	c := r.Config
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	fmt.Fprintf(&b, "# The gateway\n\nWritten by `%s`. The service runs on its own embedded NATS server in this process (the offline summariser), the gateway serves over loopback HTTP and talks to the service through the Go client, and `compactor standin` (internal/standin) is the upstream: OpenAI's and Anthropic's wire protocols, streamed and not.\n\n", command)
	fmt.Fprintf(&b, "## Added latency (no compaction due)\n\n%d conversations at once, %d turns each of a growing chat (Chat Completions), every turn sent to the stand-in directly and through the gateway one after the other (which goes first alternates); whole answers on even turns, streamed on odd ones. The stand-in takes %v to its first byte.\n\n",
		c.Conversations, c.Turns, c.ModelDelay)
	b.WriteString("| measure | direct | through the gateway | added | goal | |\n| --- | --- | --- | --- | --- | --- |\n")
	fmt.Fprintf(&b, "| whole call p50 | %.2f ms | %.2f ms | %.2f ms | <= %.0f ms | %s |\n", r.Direct.P50, r.Through.P50, r.AddedP50, gatewayGoalP50, met(r.AddedP50 <= gatewayGoalP50))
	fmt.Fprintf(&b, "| whole call p99 | %.2f ms | %.2f ms | %.2f ms | <= %.0f ms | %s |\n", r.Direct.P99, r.Through.P99, r.AddedP99, gatewayGoalP99, met(r.AddedP99 <= gatewayGoalP99))
	fmt.Fprintf(&b, "| first streamed byte p50 | %.2f ms | %.2f ms | %.2fx | <= %.1fx | %s |\n\n", r.DirectTTFB.P50, r.ThroughTTFB.P50, r.TTFBRatio, gatewayGoalTTFB, met(r.TTFBRatio <= gatewayGoalTTFB))
	rp := r.Replay
	fmt.Fprintf(&b, "## An agent past its window\n\nOne agent of Anthropic's Messages API, streamed, through the gateway: %d tool calls of some 600 tokens each, the model taking %v a call, a summary model of %v a call, a window of %d tokens.\n\n",
		rp.Steps, c.StepDelay, c.SummaryDelay, c.Window)
	b.WriteString("| measure | value | goal | |\n| --- | --- | --- | --- |\n")
	fmt.Fprintf(&b, "| finished its task | %v | yes | %s |\n", rp.Finished, met(rp.Finished))
	fmt.Fprintf(&b, "| upstream calls / over the window | %d / %d (largest %d tokens) | 0 over | %s |\n", rp.Calls, rp.OverWindow, rp.MaxTokens, met(rp.OverWindow == 0))
	fmt.Fprintf(&b, "| compactions with no model call on the turn: a prepared summary, or a clearing that needs none | %d of %d (%.0f%%) | >= %.0f%% | %s |\n", rp.NoModel, rp.Compactions, rp.NoModelPct(), gatewayGoalPrepared, met(rp.NoModelPct() >= gatewayGoalPrepared))
	fmt.Fprintf(&b, "| of which a prepared summary | %d | | |\n", rp.FromPrepared)
	fmt.Fprintf(&b, "| turns that compacted, p95 | %.0f ms | | |\n", rp.CompactedTurnP95)
	fmt.Fprintf(&b, "| the session equals what the agent sent | %v | yes | %s |\n", rp.Stored, met(rp.Stored))
	return b.String()
}
