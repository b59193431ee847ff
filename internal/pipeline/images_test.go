package pipeline_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

// pngData is a w x h PNG, made once per size (encoding is slow under the
// race detector).
var pngData = map[[2]int][]byte{}

// screenshot is a user message with text and a w x h PNG screenshot as a
// data URL.
func screenshot(t *testing.T, text string, w, h int) session.Message {
	t.Helper()
	data, ok := pngData[[2]int{w, h}]
	if !ok {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for i := 0; i < len(img.Pix); i += 97 { // not uniform, so the PNG is not tiny
			img.Pix[i] = byte(i % 251)
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		data = buf.Bytes()
		pngData[[2]int{w, h}] = data
	}
	buf := bytes.NewBuffer(data)
	parts, _ := json.Marshal([]any{
		map[string]any{"type": "text", "text": text},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())}},
	})
	m := session.Message{Role: session.RoleUser}
	if err := json.Unmarshal(parts, &m.Content); err != nil {
		t.Fatal(err)
	}
	return m
}

// A session with several screenshots compacts: the images count by
// OpenAI's rule, the summariser never gets their data (placeholders
// instead), the summary names them, and the recent ones stay raw.
func TestScreenshotsCompact(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	e, rec := newRecorderEnv(t, cfg)
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a UI testing agent.")}}
	for i := range 8 {
		msgs = append(msgs, screenshot(t, fmt.Sprintf("Screenshot %d of the checkout page after step %d.", i, i), 1920, 1080),
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Step %d: the pay button is misaligned by %d px.", i, 4+i))})
	}
	e.importSession(t, "s", 8000, msgs)
	before := e.context(t, "s")
	if n := e.counter.Context(before); n < 8*1105 {
		t.Fatalf("the session counts %d tokens: the screenshots are not counted", n)
	}
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.TokensAfter > 8000 || res.LLMCalls == 0 {
		t.Fatalf("%+v", res)
	}
	for _, req := range rec.requests() {
		body, _ := json.Marshal(req)
		if bytes.Contains(body, []byte("base64")) || bytes.Contains(body, []byte("iVBOR")) {
			t.Fatal("a summary request carries image data")
		}
		for _, m := range req.Messages {
			if len(m.Content.Parts) > 0 {
				t.Fatal("a summary request carries content parts")
			}
		}
	}
	after := e.context(t, "s")
	sum := after[1]
	if !sum.IsCompaction || !strings.Contains(sum.Compaction.SummaryText, "[image png 1920x1080]") {
		t.Fatalf("the summary does not name the screenshots:\n%s", sum.Compaction.SummaryText)
	}
	raw := 0
	for _, m := range after[2:] {
		if len(m.Content.Attachments()) > 0 {
			raw++
		}
	}
	if raw == 0 {
		t.Fatal("no screenshot stays raw in the tail")
	}
	all, _, _ := e.store.History(context.Background(), "s")
	if err := eval.CheckContext(all, after, e.counter.Context(after), 8000, e.counter, cfg.MaxSummaryTokens); err != nil {
		t.Fatal(err)
	}
}

// image_tokens is the service's own: two services in one process, one
// with image_tokens 1500, count the same remote images (size unknown)
// each by its configuration.
func TestImageEstimateIsPerService(t *testing.T) {
	remote := func(i int) session.Message {
		var m session.Message
		parts, _ := json.Marshal([]any{map[string]any{"type": "text", "text": fmt.Sprintf("Screenshot %d of the checkout page.", i)},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": fmt.Sprintf("https://example.com/shot-%d.png", i)}}})
		if err := json.Unmarshal(parts, &m.Content); err != nil {
			t.Fatal(err)
		}
		m.Role = session.RoleUser
		return m
	}
	before := map[int]int{}
	for _, images := range []int{1500, 0} { // (a process-wide estimate would stay 1500)
		cfg := pipeline.DefaultConfig()
		cfg.MaxMessages, cfg.ImageTokens = 0, images
		e, _ := newRecorderEnv(t, cfg)
		var msgs []session.Message // uncounted, as appends store them
		for i := range 6 {
			msgs = append(msgs, remote(i), session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Step %d: the pay button is misaligned.", i))})
		}
		if _, err := e.store.Create(context.Background(), session.Record{SessionID: "s", Model: "gpt-4o", ContextLimit: 3000}, msgs); err != nil {
			t.Fatal(err)
		}
		before[images] = compact(t, e, "s", pipeline.TriggerOverBudget).TokensBefore
	}
	if got, want := before[1500]-before[0], 6*(1500-765); got != want {
		t.Fatalf("tokens before: %d with image_tokens 1500, %d with the default: %d apart, want %d", before[1500], before[0], got, want)
	}
}
