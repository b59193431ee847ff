package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/sessions"
)

// screenshot is a PNG of noise whose data URL is about 700 KB, as a
// browser agent's screenshot is.
func screenshot(t *testing.T, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	img := image.NewRGBA(image.Rect(0, 0, 360, 360))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.UintN(256))
	}
	img.Set(0, 0, color.RGBA{A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// Issue 23, item 3: a session holding five screenshots of about 700 KB
// each (3.5 MB, over the 1 MB max_payload) reads back byte-identical
// through compactor.session.context and .history in parts, the Go client
// (which assembles the parts) and the CLI. (main answered 413 to every
// read of such a session.)
func TestLargeSessionReadsBack(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	url := srv.ClientURL()
	startServe(t, url)
	nc, _ := natstest.Connect(t, srv)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Create(ctx, "shots", client.NewSession{Model: "gpt-4o", ContextLimit: 128000,
		Messages: []client.Message{client.Text("sys", client.System, "You drive a browser.")}}); err != nil {
		t.Fatal(err)
	}
	var sent []client.Message
	for i := range 5 {
		url := screenshot(t, uint64(i))
		if len(url) < 650_000 || len(url) > 800_000 {
			t.Fatalf("screenshot of %d bytes", len(url))
		}
		m := client.Message{ID: fmt.Sprint("shot-", i), Role: client.User}
		raw := fmt.Sprintf(`[{"type":"text","text":"screenshot %d"},{"type":"image_url","image_url":{"url":%q}}]`, i, url)
		if err := json.Unmarshal([]byte(raw), &m.Content); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	if a, err := c.Append(ctx, "shots", sent); err != nil || a.Status != sessions.StatusApplied {
		t.Fatalf("append: %+v %v", a, err)
	}
	same := func(how string, got []client.Message) {
		t.Helper()
		if len(got) != 6 {
			t.Fatalf("%s: %d messages, want 6", how, len(got))
		}
		for i, m := range sent {
			want, _ := json.Marshal(m.Content)
			have, _ := json.Marshal(got[i+1].Content)
			if !bytes.Equal(want, have) || got[i+1].ID != m.ID {
				t.Fatalf("%s: message %d differs (%d bytes, want %d)", how, i+1, len(have), len(want))
			}
		}
	}

	// The Go client assembles the parts.
	view, err := c.Context(ctx, "shots")
	if err != nil {
		t.Fatal(err)
	}
	same("client.Context", view.Messages)
	hist, err := c.History(ctx, "shots")
	if err != nil {
		t.Fatal(err)
	}
	same("client.History", hist.Messages)

	// The endpoint itself: a 413 naming the parts, then the parts.
	m, err := nc.Request(contract.SubjectContext, []byte(`{"session_id":"shots"}`), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var eb contract.ErrorBody
	json.Unmarshal(m.Data, &eb)
	if m.Header.Get("Nats-Service-Error-Code") != "413" || eb.Parts < 4 {
		t.Fatalf("the whole context: %v %s", m.Header, m.Data)
	}
	var whole []byte
	digest := ""
	for p := range eb.Parts {
		b, _ := json.Marshal(contract.PagedBody{SessionID: "shots", Part: &p, Digest: digest})
		m, err := nc.Request(contract.SubjectContext, b, 20*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("part %d: %v %v %.200s", p, err, m.Header, m.Data)
		}
		var ap contract.AnswerPart
		if err := json.Unmarshal(m.Data, &ap); err != nil || ap.Parts != eb.Parts || ap.Part != p {
			t.Fatalf("part %d: %+v %v", p, ap.Parts, err)
		}
		digest = ap.Digest
		whole = append(whole, ap.Data...)
	}
	var byParts client.ContextView
	if err := json.Unmarshal(whole, &byParts); err != nil || contract.Digest(whole) != digest {
		t.Fatalf("the parts joined: %v", err)
	}
	same("session.context in parts", byParts.Messages)
	if byParts.Tokens != view.Tokens || byParts.HeadSeq != 6 {
		t.Fatalf("the parts joined say %d tokens, head %d; the client %d", byParts.Tokens, byParts.HeadSeq, view.Tokens)
	}

	// A part of an answer the session has moved on from is refused: read
	// again from part 0.
	if _, err := c.Append(ctx, "shots", []client.Message{client.Text("more", client.User, "and now?")}); err != nil {
		t.Fatal(err)
	}
	one := 1
	b, _ := json.Marshal(contract.PagedBody{SessionID: "shots", Part: &one, Digest: digest})
	if m, err := nc.Request(contract.SubjectContext, b, 20*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "409" {
		t.Fatalf("a part of a changed answer: %v %v", err, m.Header)
	}

	// The CLI.
	var cliView client.ContextView
	if cli(t, url, &cliView, "session", "context", "shots") != 0 {
		t.Fatal("session context failed")
	}
	same("compactor session context", cliView.Messages[:6])
	var cliHist client.History
	if cli(t, url, &cliHist, "session", "show", "shots") != 0 {
		t.Fatal("session show failed")
	}
	same("compactor session show", cliHist.Messages[:6])
}
