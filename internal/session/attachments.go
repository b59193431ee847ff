package session

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif"  // DecodeConfig of GIF screenshots
	_ "image/jpeg" // and JPEG
	_ "image/png"  // and PNG
	"io"
	"path"
	"strings"

	_ "golang.org/x/image/webp" // and WebP, which browsers' screenshots often are
)

// Attachment is a content part that is not text: an image or a file.
type Attachment struct {
	Kind      string // "image" or "file"
	URL       string // a remote image's URL ("" for inline data)
	MediaType string // "image/png", when known
	Detail    string // an OpenAI image's detail: "low", "high" or "auto"
	// Width and Height are an inline image's size in pixels (0 when the
	// data could not be read, and for remote images).
	Width, Height int
	Bytes         int    // an inline attachment's decoded size, about
	Name          string // a file's name
}

// Attachments returns the content's non-text parts, in order: OpenAI chat
// image_url and file parts, Responses input_image and input_file, and
// Anthropic image and document blocks (base64 or URL sources). Parts it
// does not know are left out.
func (c Content) Attachments() []Attachment {
	var out []Attachment
	for _, raw := range c.Parts {
		var p struct {
			Type     string          `json:"type"`
			ImageURL json.RawMessage `json:"image_url"`
			Detail   string          `json:"detail"`
			Source   *struct {
				Type      string `json:"type"`
				MediaType string `json:"media_type"`
				Data      string `json:"data"`
				URL       string `json:"url"`
			} `json:"source"`
			File *struct {
				Filename string `json:"filename"`
				FileData string `json:"file_data"`
				FileID   string `json:"file_id"`
			} `json:"file"`
			Filename string `json:"filename"`
			FileData string `json:"file_data"`
			Title    string `json:"title"`
		}
		if json.Unmarshal(raw, &p) != nil {
			continue
		}
		switch p.Type {
		case "image_url", "input_image":
			a := Attachment{Kind: "image", Detail: p.Detail}
			var s string
			if json.Unmarshal(p.ImageURL, &s) != nil {
				var obj struct {
					URL    string `json:"url"`
					Detail string `json:"detail"`
				}
				_ = json.Unmarshal(p.ImageURL, &obj)
				s = obj.URL
				if obj.Detail != "" {
					a.Detail = obj.Detail
				}
			}
			a.fromURL(s)
			out = append(out, a)
		case "image":
			a := Attachment{Kind: "image"}
			if p.Source != nil {
				if p.Source.Type == "base64" {
					a.fromData(p.Source.MediaType, p.Source.Data)
				} else {
					a.URL = p.Source.URL
				}
			}
			out = append(out, a)
		case "file", "input_file", "document":
			a := Attachment{Kind: "file", Name: firstOf(p.Filename, p.Title)}
			data := p.FileData
			if p.File != nil {
				a.Name, data = firstOf(p.File.Filename, a.Name, p.File.FileID), p.File.FileData
			}
			if p.Source != nil {
				a.MediaType, data = p.Source.MediaType, p.Source.Data
			}
			if data != "" {
				if strings.HasPrefix(data, "data:") {
					a.fromURL(data)
					a.Kind = "file"
				} else {
					a.Bytes = base64.StdEncoding.DecodedLen(len(data))
				}
			}
			out = append(out, a)
		}
	}
	return out
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// fromURL reads a data URL's media type and image size, or keeps a remote
// URL.
func (a *Attachment) fromURL(u string) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		a.URL = u
		return
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return
	}
	mt, _, _ := strings.Cut(meta, ";")
	if !strings.HasSuffix(meta, ";base64") {
		a.MediaType, a.Bytes = mt, len(data)
		return
	}
	a.fromData(mt, data)
}

// fromData reads base64 data's size and, for an image, its dimensions
// (only the header is decoded).
func (a *Attachment) fromData(mediaType, data string) {
	a.MediaType = mediaType
	a.Bytes = base64.StdEncoding.DecodedLen(len(data))
	if a.Kind != "image" {
		return
	}
	dec := base64.NewDecoder(base64.StdEncoding, strings.NewReader(strings.TrimRight(data, "\n")))
	if cfg, format, err := image.DecodeConfig(io.LimitReader(dec, 1<<20)); err == nil {
		a.Width, a.Height = cfg.Width, cfg.Height
		if a.MediaType == "" {
			a.MediaType = "image/" + format
		}
	}
}

// Placeholder is how the attachment reads in a prompt or a summary:
// "[image png 1920x1080]", "[image https://example.com/a.png]",
// "[file report.pdf]". It never holds inline data.
func (a Attachment) Placeholder() string {
	var parts []string
	parts = append(parts, a.Kind)
	if a.Name != "" {
		parts = append(parts, a.Name)
	}
	if a.MediaType != "" {
		parts = append(parts, strings.TrimPrefix(path.Base(a.MediaType), "x-"))
	}
	if a.Width > 0 && a.Height > 0 {
		parts = append(parts, fmt.Sprintf("%dx%d", a.Width, a.Height))
	}
	if a.URL != "" {
		u := a.URL
		if len(u) > 120 {
			u = u[:120] + "…"
		}
		parts = append(parts, u)
	}
	if a.URL == "" && a.Width == 0 && a.Bytes > 0 {
		parts = append(parts, fmt.Sprintf("%d KB", (a.Bytes+1023)/1024))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Placeholders returns the content's attachments as placeholders, one per
// line ("" when it has none).
func (c Content) Placeholders() string {
	if len(c.Parts) == 0 {
		return ""
	}
	var lines []string
	for _, a := range c.Attachments() {
		lines = append(lines, a.Placeholder())
	}
	return strings.Join(lines, "\n")
}
