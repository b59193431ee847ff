// Package recall finds a session's stored messages again, whatever
// compaction did with them: an inverted index of a session's messages
// (its terms: words stemmed, identifiers whole), ranked by BM25 over a
// message and its neighbours, and the bounded snippets a hit shows.
//
// An index is derived data: it is built from the session's log, grown as
// messages are appended (in seq order), and can be dropped and built again
// at any time with the same answers. It holds no message text, only
// postings; a snippet is cut from the messages read back from the store.
package recall

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/compactor/compactor/internal/session"
)

// Doc is a stored message as the index reads it.
type Doc struct {
	Seq  int64
	Role string
	// Name is the speaker's name, when the message has one: it is
	// searched as a word of the message.
	Name string
	// Text is what is searched: the message's text, its tool calls' names
	// and arguments, or the tool's result.
	Text string
	// Calls are the tool-call ids the message holds: its calls', or the
	// one it answers.
	Calls []string
}

type posting struct {
	doc uint32
	tf  uint16
}

// Index is one session's inverted index. It is not safe for concurrent
// writes; a Cache guards the indexes it holds.
type Index struct {
	seqs  []int64
	roles []string
	lens  []uint32
	total int64
	post  map[string][]posting
	calls map[string][]int64 // a tool call's id: the call's and its results' seqs
	// pairs holds each message's signature of the word pairs it holds
	// (appendSignature), from pairsAt[doc] to pairsAt[doc+1].
	pairs   []uint64
	pairsAt []uint32
	bytes   int
}

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{post: map[string][]posting{}, calls: map[string][]int64{}} }

// Call is the seqs of a tool call's message and of its results (none when
// the index has no such call).
func (ix *Index) Call(id string) []int64 { return ix.calls[id] }

// Head is the seq of the last message indexed (0: none).
func (ix *Index) Head() int64 {
	if len(ix.seqs) == 0 {
		return 0
	}
	return ix.seqs[len(ix.seqs)-1]
}

// Len is how many messages the index holds.
func (ix *Index) Len() int { return len(ix.seqs) }

// Bytes is about how much memory the index takes.
func (ix *Index) Bytes() int { return ix.bytes }

// Add indexes d, which follows every message indexed so far (a seq at
// or below Head is ignored: the index already has it).
func (ix *Index) Add(d Doc) {
	if d.Seq <= ix.Head() {
		return
	}
	var pairs pairer
	terms := appendTerms(nil, d.Text, &pairs)
	if d.Name != "" {
		terms = appendTerms(terms, strings.ReplaceAll(d.Name, "_", " "), nil)
	}
	doc := uint32(len(ix.seqs))
	if len(ix.pairsAt) == 0 {
		ix.pairsAt = append(ix.pairsAt, 0)
	}
	ix.pairs = appendSignature(ix.pairs, pairs.hashes())
	ix.pairsAt = append(ix.pairsAt, uint32(len(ix.pairs)))
	ix.bytes += 4 + 8*int(ix.pairsAt[doc+1]-ix.pairsAt[doc])
	ix.seqs = append(ix.seqs, d.Seq)
	ix.roles = append(ix.roles, internRole(d.Role))
	ix.lens = append(ix.lens, uint32(len(terms)))
	ix.total += int64(len(terms))
	ix.bytes += 8 + 16 + 4
	for _, id := range d.Calls {
		if _, ok := ix.calls[id]; !ok {
			ix.bytes += len(id) + 64
		}
		ix.calls[id] = append(ix.calls[id], d.Seq)
		ix.bytes += 8
	}
	slices.Sort(terms)
	for i := 0; i < len(terms); {
		j := i + 1
		for j < len(terms) && terms[j] == terms[i] {
			j++
		}
		t := terms[i]
		ps, ok := ix.post[t]
		if !ok {
			ix.bytes += len(t) + 64
		}
		ix.post[t] = append(ps, posting{doc: doc, tf: uint16(min(j-i, math.MaxUint16))})
		ix.bytes += 8
		i = j
	}
}

func internRole(r string) string {
	for _, k := range []string{"user", "assistant", "tool", "system"} {
		if r == k {
			return k
		}
	}
	return r
}

// Query is a search of one index.
type Query struct {
	Text string
	// Roles, when set, are the roles a hit may have.
	Roles []string
	// FromSeq and ToSeq, when set, bound a hit's seq (inclusive).
	FromSeq, ToSeq int64
	// Allow, when set, says whether a seq may be a hit (its state).
	Allow func(seq int64) bool
	// Limit is how many hits at most (default 10).
	Limit int
}

// Hit is a message that matches, with its score.
type Hit struct {
	Seq   int64   `json:"seq"`
	Score float64 `json:"score"`
}

// BM25's parameters (b below the usual 0.75: a long message, a file
// written whole or a long tool output, is not penalised as much for its
// length; LoCoMo and the agent runs both found a little more), and the
// weight of a neighbour's score in a message's: what a hit shows is the
// message with a neighbour each side, and in a conversation the words of
// a question are often spread over an exchange.
const (
	k1             = 1.2
	b              = 0.5
	neighbourShare = 0.7
)

// Search ranks the messages for q by their windows' scores (windows),
// best first (ties: the later message), no two hits within a message of
// each other (their snippets would overlap).
func (ix *Index) Search(q Query) []Hit {
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	window := ix.windows(q.Text)
	if len(window) == 0 {
		return nil
	}
	type cand struct {
		doc   uint32
		score float64
	}
	cands := make([]cand, 0, len(window))
	for doc, s := range window {
		if ix.allowed(q, doc) {
			cands = append(cands, cand{doc, s})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].doc > cands[j].doc
	})
	var hits []Hit
	taken := map[uint32]bool{}
	for _, c := range cands {
		if len(hits) == limit {
			break
		}
		if taken[c.doc] || c.doc > 0 && taken[c.doc-1] || taken[c.doc+1] {
			continue
		}
		taken[c.doc] = true
		hits = append(hits, Hit{Seq: ix.seqs[c.doc], Score: math.Round(c.score*1000) / 1000})
	}
	return hits
}

// windows is each message's score for text with a share of its
// neighbours' (a hit shows its message with a neighbour each side): for
// each of text's terms and pairs (score), the message's own score and
// neighbourShare of each neighbour's, summed in the order of the
// messages (the same scores in any order would round otherwise, and two
// replicas rank ties alike). A name (text of one word: a file's, a
// path, an id) counts once in a window, at the best of its own score
// and its neighbours' shares: summed, the messages between two mentions
// of a name came before the mentions, and in a run of an agent's edits
// to one file its first mention was never among the first hits (on
// ../shared/data, files found at 5 by their names: the short agent runs
// 5 -> 6 of 6, the long 66 -> 67 of 68; LoCoMo's questions, never one
// word, rank as they did).
func (ix *Index) windows(text string) map[uint32]float64 {
	if !strings.ContainsFunc(strings.TrimSpace(text), unicode.IsSpace) {
		window := map[uint32]float64{}
		var features []map[uint32]float64
		ix.score(text, func(f int, doc uint32, s float64) {
			if f == len(features) {
				features = append(features, map[uint32]float64{})
			}
			features[f][doc] = s
		})
		for _, f := range features {
			ix.addBest(window, f)
		}
		return window
	}
	scores := map[uint32]float64{}
	ix.score(text, func(_ int, doc uint32, s float64) { scores[doc] += s })
	window := make(map[uint32]float64, len(scores)*2)
	for _, doc := range sortedDocs(scores) {
		s := scores[doc]
		window[doc] += s
		if doc > 0 {
			window[doc-1] += neighbourShare * s
		}
		if int(doc)+1 < len(ix.seqs) {
			window[doc+1] += neighbourShare * s
		}
	}
	return window
}

// holding are the messages that hold both words of p and, by their
// signatures, p (postings are in message order).
func (ix *Index) holding(p wordPair) []uint32 {
	a, b := ix.post[p.first], ix.post[p.second]
	var out []uint32
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch da, db := a[i].doc, b[j].doc; {
		case da < db:
			i++
		case da > db:
			j++
		default:
			if hasPair(ix.pairs[ix.pairsAt[da]:ix.pairsAt[da+1]], p.hash) {
				out = append(out, da)
			}
			i++
			j++
		}
	}
	return out
}

// norm is BM25's length norm of doc: k1 scaled by its length against
// the average.
func (ix *Index) norm(doc uint32) float64 {
	return k1 * (1 - b + b*float64(ix.lens[doc])*float64(len(ix.seqs))/float64(ix.total))
}

// score calls add with, for each of text's terms and then each pair of
// its consecutive words a message holds in that order (by its
// signature), numbered from 0, each holding message's score: a term's BM25; a pair's BM25 with the
// pair as a term found once, its weight from the messages that hold it,
// times pairShare, and twice that in a message that holds every pair of
// a phrase (phrasePairs or more).
func (ix *Index) score(text string, add func(feature int, doc uint32, s float64)) {
	n := float64(len(ix.seqs))
	if n == 0 {
		return
	}
	var words pairer
	terms := appendTerms(nil, text, &words)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	feature := 0
	for _, t := range terms {
		ps := ix.post[t]
		if len(ps) == 0 {
			continue
		}
		idf := math.Log(1 + (n-float64(len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			add(feature, p.doc, idf*tf*(k1+1)/(tf+ix.norm(p.doc)))
		}
		feature++
	}
	pairs := words.distinct()
	with := make([][]uint32, len(pairs))
	for i, p := range pairs {
		with[i] = ix.holding(p)
	}
	// The messages that hold every pair (each list in message order).
	var phrase []uint32
	if len(pairs) >= phrasePairs {
		phrase = with[0]
		for _, w := range with[1:] {
			phrase = intersect(phrase, w)
		}
	}
	for i := range pairs {
		if len(with[i]) == 0 {
			continue
		}
		df := float64(len(with[i]))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, doc := range with[i] {
			s := pairShare * idf * (k1 + 1) / (1 + ix.norm(doc))
			if _, ok := slices.BinarySearch(phrase, doc); ok {
				s *= 2
			}
			add(feature, doc, s)
		}
		feature++
	}
}

// addBest adds to each message's window the best of f's score there and
// neighbourShare of its neighbours', in the order of the messages.
func (ix *Index) addBest(window, f map[uint32]float64) {
	in := make(map[uint32]float64, len(f)*3)
	for doc, s := range f {
		in[doc] = max(in[doc], s)
		if doc > 0 {
			in[doc-1] = max(in[doc-1], neighbourShare*s)
		}
		if int(doc)+1 < len(ix.seqs) {
			in[doc+1] = max(in[doc+1], neighbourShare*s)
		}
	}
	for _, doc := range sortedDocs(in) {
		window[doc] += in[doc]
	}
}

// intersect is the messages of both a and b (each in order).
func intersect(a, b []uint32) []uint32 {
	var out []uint32
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// sortedDocs are m's messages in order.
func sortedDocs(m map[uint32]float64) []uint32 {
	out := make([]uint32, 0, len(m))
	for doc := range m {
		out = append(out, doc)
	}
	slices.Sort(out)
	return out
}

func (ix *Index) allowed(q Query, doc uint32) bool {
	seq := ix.seqs[doc]
	if q.FromSeq > 0 && seq < q.FromSeq || q.ToSeq > 0 && seq > q.ToSeq {
		return false
	}
	if len(q.Roles) > 0 && !slices.Contains(q.Roles, ix.roles[doc]) {
		return false
	}
	return q.Allow == nil || q.Allow(seq)
}

// DocOf is m as the index reads it: its text, and each tool call's name
// and arguments.
func DocOf(m *session.Message) Doc {
	d := Doc{Seq: m.Seq, Role: string(m.Role), Name: m.Name, Text: m.Content.Text}
	if len(m.ToolCalls) > 0 {
		var sb strings.Builder
		sb.WriteString(d.Text)
		for _, tc := range m.ToolCalls {
			sb.WriteString("\n")
			sb.WriteString(tc.Function.Name)
			sb.WriteString(" ")
			sb.WriteString(argumentsText(tc.Function.Arguments))
		}
		d.Text = sb.String()
	}
	for _, tc := range m.ToolCalls {
		d.Calls = append(d.Calls, tc.ID)
	}
	if m.ToolCallID != "" {
		d.Calls = append(d.Calls, m.ToolCallID)
	}
	return d
}

// argumentsText is a tool call's arguments as words: the JSON's string
// values unescaped (a command's lines, a path), keys and other values as
// written; arguments that are not JSON as they are.
func argumentsText(args string) string {
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		return args
	}
	var sb strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				sb.WriteString(k)
				sb.WriteString(": ")
				walk(t[k])
				sb.WriteString("\n")
			}
		case []any:
			for _, e := range t {
				walk(e)
				sb.WriteString(" ")
			}
		case string:
			sb.WriteString(t)
		case nil:
		default:
			b, _ := json.Marshal(t)
			sb.Write(b)
		}
	}
	walk(v)
	return sb.String()
}
