package tokens_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"testing"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// OpenAI's published examples of its image rule, and the edges.
func TestImageTokens(t *testing.T) {
	for _, tc := range []struct {
		w, h   int
		detail string
		want   int
	}{
		{1024, 1024, "high", 765},  // scaled to 768x768: 4 tiles
		{2048, 4096, "high", 1105}, // to 1024x2048, then 768x1536: 6 tiles
		{4096, 8192, "auto", 1105},
		{1920, 1080, "", 1105}, // 1365x768: 3x2 tiles
		{512, 512, "high", 255},
		{100, 100, "", 255},
		{513, 100, "", 425},
		{4000, 3000, "low", 85},
		{0, 0, "high", tokens.DefaultImageTokens}, // size unknown
	} {
		if got := tokens.ImageTokens(session.Attachment{Kind: "image", Width: tc.w, Height: tc.h, Detail: tc.detail}); got != tc.want {
			t.Errorf("%dx%d %s: %d, want %d", tc.w, tc.h, tc.detail, got, tc.want)
		}
	}
	c := counter(t, "o200k_base")
	remote := session.Attachment{Kind: "image", URL: "https://example.com/a.png"}
	if got := c.WithImageEstimate(1500).Attachment(remote); got != 1500 {
		t.Fatalf("configured estimate: %d", got)
	}
	if got := c.Attachment(remote); got != tokens.DefaultImageTokens {
		t.Fatalf("a counter without an estimate of its own counts %d, want the default (the estimate is not process-wide)", got)
	}
}

// A message's count has its images by the rule and none of their data.
func TestMessageCountsImages(t *testing.T) {
	c := counter(t, "o200k_base")
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1920, 1080))); err != nil {
		t.Fatal(err)
	}
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
	raw := `[{"type":"text","text":"the build page shows this"},{"type":"image_url","image_url":{"url":"` + url + `"}},{"type":"image_url","image_url":{"url":"` + url + `","detail":"low"}}]`
	var m session.Message
	m.Role = session.RoleUser
	if err := json.Unmarshal([]byte(raw), &m.Content); err != nil {
		t.Fatal(err)
	}
	text := session.Message{Role: session.RoleUser, Content: session.TextContent("the build page shows this")}
	if got, want := c.Message(&m), c.Message(&text)+1105+85; got != want {
		t.Fatalf("%d tokens, want %d", got, want)
	}
}
