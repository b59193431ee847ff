package recall

import (
	"math"
	"slices"
)

// Phrases: a query's words in the order a message has them ("support
// group", "DEBUG: Package.collect") say more than the same words spread
// over it. The index keeps no positions; each message keeps a signature
// of the pairs of consecutive words it holds (stop words left out, as
// terms are), pairBits bits a pair set by two hashes. A query's pair
// scores in each message that holds both its words and, by the
// signature, the pair: as a BM25 term found once, weighted by how many
// messages hold it, times pairShare. A signature may say a pair is there
// that is not (about one in twenty at pairBits); never the reverse.

// pairBits is the signature's bits for each pair a message holds;
// pairShare a pair's share of a term's score. (On ../shared/data, over
// whole conversations: agent runs' files, commands and errors found at 5
// went from 391 to 395 of 404, LoCoMo's evidence at 5 from 0.617 to
// 0.621; at a share of 1.0, 397 of 404 but 0.615.)
//
// A message that holds every pair of a query of phrasePairs pairs or
// more holds it as a phrase, as far as the signatures tell (a command
// whole, an error's line): its pairs count twice. A long command
// otherwise lost to later messages that repeat most of its words (a
// test's SQL printed back, a debug line's text in its output): the long
// agent runs' files, commands and errors found at 5 went from 214 to 218
// of 220, the short runs' from 33 to 34 of 35; LoCoMo's evidence at 5
// stayed 0.617.
const (
	pairBits    = 8
	pairShare   = 0.5
	phrasePairs = 2
)

// wordPair is a query's pair of consecutive words (as terms).
type wordPair struct {
	first, second string
	hash          uint64
}

// pairer collects a text's pairs of consecutive words as its terms are
// made (appendTerms).
type pairer struct {
	prev  string
	pairs []wordPair
}

// add takes w as the text's next word.
func (p *pairer) add(w string) {
	if p == nil {
		return
	}
	if p.prev != "" {
		p.pairs = append(p.pairs, wordPair{p.prev, w, pairHash(p.prev, w)})
	}
	p.prev = w
}

// hashes are the pairs' hashes, each once.
func (p *pairer) hashes() []uint64 {
	out := make([]uint64, len(p.pairs))
	for i, wp := range p.pairs {
		out[i] = wp.hash
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// distinct are the pairs, each once, in order.
func (p *pairer) distinct() []wordPair {
	var out []wordPair
	for _, wp := range p.pairs {
		if !slices.ContainsFunc(out, func(o wordPair) bool { return o.hash == wp.hash }) {
			out = append(out, wp)
		}
	}
	return out
}

// pairHash is FNV-1a of "a\x00b": the same in every process, so that
// every replica's signatures (built from the log) rank alike.
func pairHash(a, b string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(a); i++ {
		h = (h ^ uint64(a[i])) * prime
	}
	h *= prime // (the 0 between)
	for i := 0; i < len(b); i++ {
		h = (h ^ uint64(b[i])) * prime
	}
	return h
}

// appendSignature adds to sig the signature of a message's pairs (their
// hashes): pairBits bits for each, rounded up to whole words, at least
// none.
func appendSignature(sig []uint64, hashes []uint64) []uint64 {
	if len(hashes) == 0 {
		return sig
	}
	n := (len(hashes)*pairBits + 63) / 64
	at := len(sig)
	sig = append(sig, make([]uint64, n)...)
	for _, h := range hashes {
		for _, bit := range pairBitsOf(h, n*64) {
			sig[at+bit/64] |= 1 << (bit % 64)
		}
	}
	return sig
}

// hasPair reports whether sig may hold the pair of hash h.
func hasPair(sig []uint64, h uint64) bool {
	if len(sig) == 0 {
		return false
	}
	for _, bit := range pairBitsOf(h, len(sig)*64) {
		if sig[bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

// pairBitsOf are the two bits of n a pair's hash sets.
func pairBitsOf(h uint64, n int) [2]int {
	second := h>>32 | h<<32
	second *= math.MaxUint32 + 2 // (odd: a bijection)
	return [2]int{int(h % uint64(n)), int(second % uint64(n))}
}
