package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/compactor/compactor/client"
)

// conv is one provider request read: its top-level fields, the elements
// of its conversation (messages or input items) as the runtime sent them,
// and the session's messages they make (canonical: the OpenAI chat shape
// the service stores), each with the elements (and blocks) it came from.
type conv struct {
	api    *api
	fields map[string]json.RawMessage
	model  string
	stream bool
	// key names the conversation when the protocol carries it (Anthropic's
	// metadata.user_id, OpenAI's prompt_cache_key).
	key string
	// asIs says why the call goes upstream as it came, when it does: the
	// upstream holds the conversation (a Responses previous_response_id or
	// conversation), or it uses the legacy function calling the session
	// cannot pair.
	asIs string
	// head are the leading system (and developer) elements: sent as they
	// are, never stored, like Anthropic's system field.
	head  []json.RawMessage
	elems []json.RawMessage
	msgs  []client.Message
	from  [][]span
	// digests are the messages' canonical digests.
	digests []string
	// ids are the messages' chain ids: each a digest of its message and
	// the id before it, so an id names its whole prefix.
	ids []string
	// overhead is what every upstream call carries besides the messages
	// (system, tools, instructions), to count once.
	overhead []byte
	// maxOutput is the reply's token budget the request asks for.
	maxOutput int
}

// span is where a message came from: an element, and its blocks when it
// is made of some of them (nil: the whole element).
type span struct {
	elem   int
	blocks []int
}

// add appends a message of digest made of sp.
func (c *conv) add(m client.Message, digest string, sp ...span) {
	c.msgs = append(c.msgs, m)
	c.digests = append(c.digests, digest)
	c.from = append(c.from, sp)
}

// attach gives the elements no message was made of (reasoning items, a
// thinking-only message) to the message after them, or the last one, so
// they go upstream with it and are summarised with it.
func (c *conv) attach(orphans []int) {
	if len(orphans) == 0 || len(c.msgs) == 0 {
		return
	}
	last := len(c.from) - 1
	c.from[last] = append(c.from[last], spansOf(orphans)...)
}

func spansOf(elems []int) []span {
	out := make([]span, len(elems))
	for i, e := range elems {
		out[i] = span{elem: e}
	}
	return out
}

// chain computes the messages' chain ids from their digests.
func (c *conv) chain() {
	c.ids = make([]string, len(c.msgs))
	prev := ""
	for i := range c.msgs {
		sum := sha256.Sum256([]byte(prev + c.digests[i]))
		prev = "g" + hex.EncodeToString(sum[:15])
		c.ids[i] = prev
		c.msgs[i].ID = prev
	}
}

// item is one element of what goes upstream: a message of the
// conversation (by its index), cleared to placeholder when set, or the
// summary's text.
type item struct {
	msg         int
	placeholder string
	summary     string
}

// render returns the conversation's elements for items: the runtime's own
// elements where a message is whole, rebuilt from the blocks kept (and
// cleared) otherwise, the summary as the protocol's user message.
func (c *conv) render(items []item) ([]json.RawMessage, error) {
	out := append([]json.RawMessage(nil), c.head...)
	type pending struct {
		elem   int
		blocks []int
		clear  map[int]string // block (or -1, the element) -> placeholder
		whole  bool
	}
	var cur *pending
	flush := func() error {
		if cur == nil {
			return nil
		}
		raw := c.elems[cur.elem]
		if !cur.whole || len(cur.clear) > 0 {
			var err error
			if raw, err = c.api.rebuild(raw, cur.blocks, cur.whole, cur.clear); err != nil {
				return err
			}
		}
		out = append(out, raw)
		cur = nil
		return nil
	}
	for _, it := range items {
		if it.summary != "" {
			if err := flush(); err != nil {
				return nil, err
			}
			out = append(out, c.api.summary(it.summary))
			continue
		}
		for _, sp := range c.from[it.msg] {
			if cur != nil && cur.elem != sp.elem {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			if cur == nil {
				cur = &pending{elem: sp.elem, clear: map[int]string{}}
			}
			if sp.blocks == nil {
				cur.whole = true
				if it.placeholder != "" {
					cur.clear[-1] = it.placeholder
				}
				continue
			}
			cur.blocks = append(cur.blocks, sp.blocks...)
			if it.placeholder != "" {
				for _, b := range sp.blocks {
					cur.clear[b] = it.placeholder
				}
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// rawMap decodes an element's JSON object.
func rawMap(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// jsonString is s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// textOf reads a content that is a string or null.
func textOf(raw json.RawMessage) (string, bool) {
	var s *string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	if s == nil {
		return "", true
	}
	return *s, true
}
