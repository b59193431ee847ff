// Package tokens counts tokens the way OpenAI's models do, with tiktoken
// encodings embedded in the binary (no download at run time).
//
// o200k_base and cl100k_base are counted by bpe, with their pre-tokenising
// expressions written out (pretoken.go) instead of run by regexp2, some 20
// times faster; tests hold both to the expressions and to tiktoken-go's
// counts. tiktoken-go encodes the other encodings, and Split.
//
// Building an encoding takes tens of milliseconds and tens of megabytes, so
// each encoding is built once per process and shared; a Counter is safe for
// concurrent use. A text is encoded once per process: counts are cached by
// the text's 128-bit hash (the latest few hundred thousand texts), so
// counting moved off the append path (issue 24) costs the compaction that
// needs it once, not at every compaction and context read. Ensure also
// stores the count on the message.
package tokens

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/session"
)

// Overheads from OpenAI's "How to count tokens with tiktoken": every message
// costs tokensPerMessage, a name tokensPerName more, and the reply is primed
// with replyPriming tokens.
const (
	tokensPerMessage = 3
	tokensPerName    = 1
	replyPriming     = 3
	// tokensPerToolCall approximates the framing of one tool call in an
	// assistant message (OpenAI does not document it).
	tokensPerToolCall = 3
)

// pieceSize bounds the text handed to the encoder at once. tiktoken-go
// allocates tens of bytes per input byte, so a 1 MB tool output would peak
// near 100 MB; counting it in pieces split where the encoder's own
// pre-tokeniser splits gives the same count in bounded memory.
const pieceSize = 16 << 10

var (
	loaderOnce sync.Once
	mu         sync.Mutex
	encodings  = map[string]*encodingOnce{}
)

type encodingOnce struct {
	name string
	// enc is tiktoken-go's encoder, built when first needed (Split, and
	// the encodings fast is not written for).
	once sync.Once
	enc  *tiktoken.Tiktoken
	err  error
	// fast counts o200k_base and cl100k_base (nil for the others).
	fastOnce sync.Once
	fast     *bpe
	fastErr  error
	cache    countCache
}

// tiktoken returns tiktoken-go's encoder, building it the first time.
func (e *encodingOnce) tiktoken() (*tiktoken.Tiktoken, error) {
	e.once.Do(func() { e.enc, e.err = tiktoken.GetEncoding(e.name) })
	return e.enc, e.err
}

// fastFor are the encodings bpe counts, by their pre-tokenisers and the
// files tiktoken-go-loader embeds their ranks under.
var fastFor = map[string]struct {
	next next
	file string
}{
	models.O200kBase:  {o200kNext, "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"},
	models.CL100kBase: {cl100kNext, "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"},
}

// counter returns the encoding's fast counter (nil when there is none).
func (e *encodingOnce) counter() (*bpe, error) {
	e.fastOnce.Do(func() {
		f, ok := fastFor[e.name]
		if !ok {
			return
		}
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(f.file)
		if err != nil {
			e.fastErr = err
			return
		}
		e.fast = &bpe{ranks: ranks, next: f.next}
	})
	return e.fast, e.fastErr
}

// countCache maps texts (by a 128-bit hash) to their counts: two
// generations, the current one moved to old when full, so the texts used
// lately stay and memory is bounded (cacheSize entries a generation).
type countCache struct {
	mu       sync.Mutex
	cur, old map[[2]uint64]int32
}

const cacheSize = 200_000

var seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func textKey(text string) [2]uint64 {
	return [2]uint64{maphash.String(seeds[0], text), maphash.String(seeds[1], text)}
}

func (c *countCache) get(k [2]uint64) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.cur[k]; ok {
		return int(n), true
	}
	if n, ok := c.old[k]; ok {
		c.put(k, int(n))
		return int(n), true
	}
	return 0, false
}

// put needs c.mu held.
func (c *countCache) put(k [2]uint64, n int) {
	if c.cur == nil || len(c.cur) >= cacheSize {
		c.old, c.cur = c.cur, make(map[[2]uint64]int32, 1024)
	}
	c.cur[k] = int32(n)
}

func encoding(name string) (*encodingOnce, error) {
	loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	mu.Lock()
	e, ok := encodings[name]
	if !ok {
		e = &encodingOnce{name: name}
		encodings[name] = e
	}
	mu.Unlock()
	if fast, err := e.counter(); fast != nil || err != nil {
		return e, err
	}
	_, err := e.tiktoken()
	return e, err
}

// encoded counts the bytes handed to the encoder, process-wide: the metric
// that shows a message is tokenised once, not on every compaction.
var encoded atomic.Int64

// EncodedBytes returns how many bytes of text all counters have encoded
// since the process started.
func EncodedBytes() int64 { return encoded.Load() }

// Counter counts tokens for one encoding.
type Counter struct {
	name  string
	e     *encodingOnce
	cache *countCache
	// images is what an image of unknown size counts (0: the default).
	images int
}

// ForEncoding returns a counter for a tiktoken encoding name such as
// "o200k_base" or "cl100k_base". It returns an error for an unknown name.
func ForEncoding(name string) (*Counter, error) {
	if !models.SupportedEncoding(name) {
		return nil, fmt.Errorf("tokens: unsupported encoding %q", name)
	}
	e, err := encoding(name)
	if err != nil {
		return nil, fmt.Errorf("tokens: load %s: %w", name, err)
	}
	return &Counter{name: name, e: e, cache: &e.cache}, nil
}

// Encoding returns the encoding's name.
func (c *Counter) Encoding() string { return c.name }

// Count returns the number of tokens in text. Special-token text such as
// "<|endoftext|>" is counted as ordinary text, as the chat APIs treat user
// content.
func (c *Counter) Count(text string) int {
	if text == "" {
		return 0
	}
	// Every other text is cached, a role's or a name's too: a load
	// counts every message's role (BenchmarkCountShort).
	k := textKey(text)
	if n, ok := c.cache.get(k); ok {
		return n
	}
	n := c.encode(text)
	c.cache.mu.Lock()
	c.cache.put(k, n)
	c.cache.mu.Unlock()
	return n
}

// encode counts text with the encoder, in pieces.
func (c *Counter) encode(text string) int {
	encoded.Add(int64(len(text)))
	n := 0
	for len(text) > 0 {
		piece := text
		if len(text) > pieceSize {
			piece = text[:splitPoint(text, pieceSize)]
		}
		n += c.encodePiece(piece)
		text = text[len(piece):]
	}
	return n
}

// encodePiece counts piece: with the fast counter where the encoding has
// one, else with tiktoken-go.
func (c *Counter) encodePiece(piece string) int {
	if c.e.fast != nil {
		return c.e.fast.count(piece)
	}
	return len(c.encoder().EncodeOrdinary(piece))
}

// encoder is tiktoken-go's encoder of c's encoding. ForEncoding built it
// or the fast counter without error; built now, an error here is the
// embedded files' and a bug.
func (c *Counter) encoder() *tiktoken.Tiktoken {
	enc, err := c.e.tiktoken()
	if err != nil {
		panic(fmt.Sprintf("tokens: build %s: %v", c.name, err))
	}
	return enc
}

// splitPoint returns a cut at or before limit where the encoder would start
// a new piece anyway: after a newline that is followed by a character that is
// not whitespace. Without one it falls back to a space before a letter, then
// to a rune boundary within a short run (the count may then differ by a
// token). The short run matters: byte-pair merging is quadratic in the length
// of one pre-token, so a 1 MB run of letters must not reach it whole.
func splitPoint(s string, limit int) int {
	if i := strings.LastIndexByte(s[:limit], '\n'); i > 0 && i+1 < len(s) && !isSpace(s[i+1]) {
		return i + 1
	}
	for i := limit; i > limit/2; i-- {
		if s[i-1] == ' ' && !isSpace(s[i]) && s[i] < utf8.RuneSelf {
			return i - 1
		}
	}
	i := min(limit, 1024)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	if i == 0 {
		return min(limit, 1024)
	}
	return i
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\n' || b == '\t' || b == '\r' || b == '\f' || b == '\v'
}

// Message returns a message's tokens including the per-message overhead (but
// not the reply priming, which Context adds once).
func (c *Counter) Message(m *session.Message) int {
	n := tokensPerMessage + c.Count(string(m.Role)) + c.Count(m.Content.Text)
	if len(m.Content.Parts) > 0 {
		for _, a := range m.Content.Attachments() {
			n += c.Attachment(a)
		}
	}
	if m.Name != "" {
		n += c.Count(m.Name) + tokensPerName
	}
	for _, tc := range m.ToolCalls {
		n += tokensPerToolCall + c.Count(tc.Function.Name) + c.Count(tc.Function.Arguments)
	}
	return n
}

// Ensure returns the message's token count, counting and storing it on the
// message only when it has none yet.
func (c *Counter) Ensure(m *session.Message) int {
	if m.Tokens <= 0 {
		m.Tokens = c.Message(m)
	}
	return m.Tokens
}

// Context returns the tokens a model is charged for sending msgs: each
// message (counted once, via Ensure) plus the reply priming.
func (c *Counter) Context(msgs []session.Message) int {
	n := replyPriming
	for i := range msgs {
		n += c.Ensure(&msgs[i])
	}
	return n
}

// ReplyPriming is the constant a request adds on top of its messages.
func ReplyPriming() int { return replyPriming }

// Truncate returns the longest prefix of text with at most n tokens.
func (c *Counter) Truncate(text string, n int) string {
	if n <= 0 {
		return ""
	}
	parts := c.Split(text, n)
	if len(parts) == 0 {
		return ""
	}
	return parts[0]
}

// Split cuts text into consecutive pieces of about n tokens each (n > 0), at
// token boundaries; joined, the pieces give back text exactly. A token that
// ends inside a multi-byte character moves the character's bytes into the
// next piece, so every piece is valid UTF-8 and may be a token longer than
// n. Split encodes text once.
func (c *Counter) Split(text string, n int) []string {
	if n <= 0 || text == "" {
		return nil
	}
	encoded.Add(int64(len(text)))
	var out []string
	var cur []int
	carry := ""
	emit := func() {
		s := carry + c.encoder().Decode(cur)
		cur = cur[:0]
		cut := len(s)
		for k := 1; k <= utf8.UTFMax && k <= len(s); k++ {
			if utf8.RuneStart(s[len(s)-k]) {
				if !utf8.FullRuneInString(s[len(s)-k:]) {
					cut = len(s) - k
				}
				break
			}
		}
		carry = s[cut:]
		if cut > 0 {
			out = append(out, s[:cut])
		}
	}
	for len(text) > 0 {
		piece := text
		if len(text) > pieceSize {
			piece = text[:splitPoint(text, pieceSize)]
		}
		text = text[len(piece):]
		ids := c.encoder().EncodeOrdinary(piece)
		for len(ids) > 0 {
			take := min(n-len(cur), len(ids))
			cur = append(cur, ids[:take]...)
			ids = ids[take:]
			if len(cur) == n {
				emit()
			}
		}
	}
	if len(cur) > 0 {
		emit()
	}
	if carry != "" {
		if len(out) == 0 {
			return []string{carry}
		}
		out[len(out)-1] += carry
	}
	return out
}
