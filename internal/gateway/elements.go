package gateway

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/compactor/compactor/client"
)

// A runtime sends its whole conversation each turn, and every element but
// the newest ones it sent before: each element's reading (its messages
// and their digests) is kept by the digest of its bytes, so a turn reads
// only what is new. The body itself is scanned once (jsontext).

// parsed is what one element reads as.
type parsed struct {
	// kind is the API's: a chat or Anthropic message's role, or a
	// Responses item's kind ("message", "call", "output", "other").
	kind string
	role string
	msgs []client.Message
	// blocks are each message's blocks of the element (nil: all of it).
	blocks [][]int
	// digests are each message's canonical JSON's digest.
	digests []string
	// call is a Responses call item's tool call.
	call *client.ToolCall
	size int
}

// digestOf is a message's canonical digest (its id left out).
func digestOf(m client.Message) (string, error) {
	m.ID = ""
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// seal computes the digests of p's messages.
func (p *parsed) seal(raw []byte) (*parsed, error) {
	p.size = len(raw)
	p.digests = make([]string, len(p.msgs))
	for i, m := range p.msgs {
		d, err := digestOf(m)
		if err != nil {
			return nil, err
		}
		p.digests[i] = d
	}
	return p, nil
}

// elementCache keeps elements' readings within a byte budget, the least
// recently read dropped first.
type elementCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List
	byKey map[[32]byte]*list.Element
}

type cached struct {
	key [32]byte
	p   *parsed
}

func newElementCache(max int) *elementCache {
	return &elementCache{max: max, order: list.New(), byKey: map[[32]byte]*list.Element{}}
}

// read returns raw's reading by a, from the cache or read now.
func (ec *elementCache) read(a *api, raw []byte) (*parsed, error) {
	h := sha256.New()
	h.Write([]byte(a.name))
	h.Write(raw)
	var key [32]byte
	h.Sum(key[:0])
	ec.mu.Lock()
	if e, ok := ec.byKey[key]; ok {
		ec.order.MoveToFront(e)
		ec.mu.Unlock()
		return e.Value.(*cached).p, nil
	}
	ec.mu.Unlock()
	p, err := a.element(raw)
	if err != nil {
		return nil, err
	}
	if p, err = p.seal(raw); err != nil {
		return nil, err
	}
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if _, ok := ec.byKey[key]; !ok {
		ec.byKey[key] = ec.order.PushFront(&cached{key: key, p: p})
		ec.size += p.size
		for ec.size > ec.max && ec.order.Len() > 1 {
			last := ec.order.Back()
			c := last.Value.(*cached)
			ec.order.Remove(last)
			delete(ec.byKey, c.key)
			ec.size -= c.p.size
		}
	}
	return p, nil
}

// scan reads a body's top-level fields and its list's elements in one
// pass (each a copy: jsontext's values live until its next read).
func scan(body []byte, list string) (fields map[string]json.RawMessage, elems []json.RawMessage, err error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
		return nil, nil, errors.New("the body is not a JSON object")
	}
	fields = map[string]json.RawMessage{}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, nil, fmt.Errorf("the body is not valid JSON: %v", err)
		}
		name := tok.String() // (a token lives until the next read)
		if name != list || dec.PeekKind() != '[' {
			v, err := dec.ReadValue()
			if err != nil {
				return nil, nil, fmt.Errorf("the body is not valid JSON: %v", err)
			}
			fields[name] = bytes.Clone(v)
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, nil, err
		}
		elems = []json.RawMessage{}
		for dec.PeekKind() != ']' {
			v, err := dec.ReadValue()
			if err != nil {
				return nil, nil, fmt.Errorf("%s: not valid JSON: %v", list, err)
			}
			elems = append(elems, bytes.Clone(v))
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, nil, err
		}
		fields[name] = nil // the list: see elems
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, nil, err
	}
	if _, err := dec.ReadToken(); err == nil {
		return nil, nil, errors.New("the body holds more than one JSON value")
	}
	return fields, elems, nil
}
