package session_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/session"
)

// pngURL is a data URL of a w x h PNG.
func pngURL(t *testing.T, w, h int) string {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestAttachmentsOfEveryFormat(t *testing.T) {
	var jpg bytes.Buffer
	if err := jpeg.Encode(&jpg, image.NewRGBA(image.Rect(0, 0, 640, 480)), nil); err != nil {
		t.Fatal(err)
	}
	jpgData := base64.StdEncoding.EncodeToString(jpg.Bytes())
	parts := `[{"type":"text","text":"what is on these?"},
		{"type":"image_url","image_url":{"url":"` + pngURL(t, 1920, 1080) + `","detail":"high"}},
		{"type":"image_url","image_url":{"url":"https://example.com/shot.png","detail":"low"}},
		{"type":"input_image","image_url":"` + pngURL(t, 300, 200) + `"},
		{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"` + jpgData + `"}},
		{"type":"image","source":{"type":"url","url":"https://example.com/b.webp"}},
		{"type":"file","file":{"filename":"report.pdf","file_data":"data:application/pdf;base64,JVBERi0xLjQK"}},
		{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]`
	var c session.Content
	if err := json.Unmarshal([]byte(parts), &c); err != nil {
		t.Fatal(err)
	}
	got := c.Attachments()
	want := []string{"[image png 1920x1080]", "[image https://example.com/shot.png]", "[image png 300x200]",
		"[image jpeg 640x480]", "[image https://example.com/b.webp]", "[file report.pdf pdf 1 KB]"}
	if len(got) != len(want) {
		t.Fatalf("%d attachments: %+v", len(got), got)
	}
	for i := range want {
		if p := got[i].Placeholder(); p != want[i] {
			t.Errorf("attachment %d: %q, want %q", i, p, want[i])
		}
	}
	if got[1].Detail != "low" || got[0].Detail != "high" {
		t.Fatalf("details %q %q", got[0].Detail, got[1].Detail)
	}
	if ph := c.Placeholders(); strings.Contains(ph, "base64") || strings.Contains(ph, "iVBOR") || strings.Count(ph, "\n") != 5 {
		t.Fatalf("placeholders %q", ph)
	}
	// A broken image is still an image, of unknown size.
	var bad session.Content
	if err := json.Unmarshal([]byte(`[{"type":"image_url","image_url":{"url":"data:image/png;base64,bm90IGFuIGltYWdl"}}]`), &bad); err != nil {
		t.Fatal(err)
	}
	if a := bad.Attachments(); len(a) != 1 || a[0].Width != 0 || a[0].Placeholder() != "[image png 1 KB]" {
		t.Fatalf("broken image: %+v", a)
	}
}
