package tokens

import (
	"math"
	"sync/atomic"

	"github.com/compactor/compactor/internal/session"
)

// DefaultImageTokens is what an image whose size cannot be read (a remote
// URL, an unknown format) is counted as: a 1024x1024 image in high detail
// under OpenAI's rule.
const DefaultImageTokens = 765

var imageEstimate atomic.Int64

func init() { imageEstimate.Store(DefaultImageTokens) }

// SetImageEstimate sets what an image of unknown size counts (the
// configured image_tokens); n <= 0 restores the default.
func SetImageEstimate(n int) {
	if n <= 0 {
		n = DefaultImageTokens
	}
	imageEstimate.Store(int64(n))
}

// ImageEstimate is what an image of unknown size counts.
func ImageEstimate() int { return int(imageEstimate.Load()) }

// ImageTokens is OpenAI's published cost of an image in a model's input:
// 85 in low detail; otherwise the image is scaled to fit 2048x2048, then
// so that its shorter side is at most 768, and costs 85 plus 170 per
// 512-pixel tile. An image of unknown size counts ImageEstimate.
func ImageTokens(a session.Attachment) int {
	if a.Detail == "low" {
		return 85
	}
	if a.Width <= 0 || a.Height <= 0 {
		return ImageEstimate()
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

// Attachment is what an attachment costs: an image by ImageTokens; a
// file, whose cost depends on the provider's reading of it, by its
// placeholder text.
func (c *Counter) Attachment(a session.Attachment) int {
	if a.Kind == "image" {
		return ImageTokens(a)
	}
	return c.Count(a.Placeholder())
}
