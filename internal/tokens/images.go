package tokens

import (
	"math"

	"github.com/compactor/compactor/internal/session"
)

// DefaultImageTokens is what an image whose size cannot be read (a remote
// URL, an unknown format) is counted as: a 1024x1024 image in high detail
// under OpenAI's rule.
const DefaultImageTokens = 765

// ImageTokens is OpenAI's published cost of an image in a model's input:
// 85 in low detail; otherwise the image is scaled to fit 2048x2048, then
// so that its shorter side is at most 768, and costs 85 plus 170 per
// 512-pixel tile. An image of unknown size counts ImageEstimate.
func ImageTokens(a session.Attachment) int { return imageTokens(a, DefaultImageTokens) }

// imageTokens is ImageTokens with an image of unknown size counted as
// unknown.
func imageTokens(a session.Attachment, unknown int) int {
	if a.Detail == "low" {
		return 85
	}
	if a.Width <= 0 || a.Height <= 0 {
		return unknown
	}
	w, h := a.Width, a.Height
	scale := func(to, side int) { // whole pixels, as a resize makes them
		w, h = int(math.Floor(float64(w)*float64(to)/float64(side)+1e-9)), int(math.Floor(float64(h)*float64(to)/float64(side)+1e-9))
	}
	if m := max(w, h); m > 2048 {
		scale(2048, m)
	}
	if s := min(w, h); s > 768 {
		scale(768, s)
	}
	tiles := ((w + 511) / 512) * ((h + 511) / 512)
	return 85 + 170*tiles
}

// Attachment is what an attachment costs: an image by ImageTokens (one of
// unknown size as the counter's image estimate); a file, whose cost
// depends on the provider's reading of it, by its placeholder text.
func (c *Counter) Attachment(a session.Attachment) int {
	if a.Kind == "image" {
		return imageTokens(a, c.ImageEstimate())
	}
	return c.Count(a.Placeholder())
}

// WithImageEstimate returns a counter like c (the same encoding and
// cache) that counts an image of unknown size as n tokens (the
// configured image_tokens); n <= 0: DefaultImageTokens.
func (c *Counter) WithImageEstimate(n int) *Counter {
	cp := *c
	cp.images = max(n, 0)
	return &cp
}

// ImageEstimate is what c counts an image of unknown size as.
func (c *Counter) ImageEstimate() int {
	if c.images > 0 {
		return c.images
	}
	return DefaultImageTokens
}
