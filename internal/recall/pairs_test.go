package recall

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// A signature never says a pair it holds is missing, and says few it
// does not hold are there.
func TestSignatureHoldsEveryPair(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	vocab := make([]string, 3000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%dx", i)
	}
	falsePos, tried := 0, 0
	for range 300 {
		words := make([]string, 1+r.IntN(400))
		for i := range words {
			words[i] = vocab[r.IntN(len(vocab))]
		}
		text := strings.Join(words, " ")
		var p pairer
		appendTerms(nil, text, &p)
		sig := appendSignature(nil, p.hashes())
		held := map[uint64]bool{}
		for _, wp := range p.pairs {
			held[wp.hash] = true
			if !hasPair(sig, wp.hash) {
				t.Fatalf("the signature of %q lacks (%s, %s)", text, wp.first, wp.second)
			}
		}
		if len(p.pairs) != len(words)-1 {
			t.Fatalf("%d pairs of %d words", len(p.pairs), len(words))
		}
		for range 50 {
			h := pairHash(vocab[r.IntN(len(vocab))], vocab[r.IntN(len(vocab))])
			if held[h] {
				continue
			}
			tried++
			if hasPair(sig, h) {
				falsePos++
			}
		}
	}
	// Two bits of eight a pair: about 5 % of pairs not held say yes.
	if share := float64(falsePos) / float64(tried); share > 0.08 {
		t.Fatalf("%d of %d pairs not held found (%.1f %%)", falsePos, tried, 100*share)
	}
}

// Words in the order a query has them rank a message over one holding
// the same words apart (as many terms: without the pair the later would
// rank first); the index's bytes count the signatures.
func TestPhraseRanksFirst(t *testing.T) {
	ix := NewIndex()
	texts := []string{
		"after work I went to a support group meeting",    // 1: in order
		"it was filler text about nothing at all",         // 2
		"a photo of the lake",                             // 3
		"more filler about the weather and the rain",      // 4
		"group meetings helped my support network a lot",  // 5: apart
		"and the last filler line of this small exchange", // 6
	}
	before := 0
	for i, text := range texts {
		ix.Add(Doc{Seq: int64(i + 1), Role: "user", Text: text})
		if i == 0 {
			before = ix.Bytes()
		}
	}
	if a, b := len(Terms(texts[0])), len(Terms(texts[4])); a != b {
		t.Fatalf("%d and %d terms: the test needs as many", a, b)
	}
	hits := ix.Search(Query{Text: "support group", Limit: 3})
	if len(hits) < 2 || hits[0].Seq != 1 || hits[1].Seq != 5 {
		t.Fatalf("hits %+v, want the message with the phrase (1), then the other (5)", hits)
	}
	if ix.Bytes() <= before || len(ix.pairsAt) != len(texts)+1 {
		t.Fatalf("bytes %d (first message %d), %d signature offsets", ix.Bytes(), before, len(ix.pairsAt))
	}
	// (support, group) and (group, support), each once.
	var words pairer
	appendTerms(nil, "Support group, support group!", &words)
	if p := words.distinct(); len(p) != 2 || p[0].first != "support" || p[0].second != "group" {
		t.Fatalf("pairs %+v", p)
	}
}

// A query held whole, as a phrase, ranks its message over a shorter one
// that holds its words more often and most of its pairs (a command
// against its output printed back): without the phrase's share, the
// output ranks first.
func TestAWholeCommandRanksItsMessage(t *testing.T) {
	texts := []string{
		"let me look at how the collector finds packages",
		"the collector never reaches the package, so I will add a debug print to the method that collects it and run the tests again to see what it says: " +
			`sed -i '641a print(f"DEBUG: Package.collect {self.fspath}")' python.py`, // 2: the command
		"the output of an unrelated listing of the tests directory",
		"a note about the weather in the logs, nothing more",
		`sed: python.py: print(f"DEBUG: Package.collect {self.fspath}") print(f"DEBUG: Package.collect {self.fspath}") 641a`, // 5
		"and another line of filler for the end of this run",
		"one more line of filler text so that neighbours stay apart",
	}
	ix := NewIndex()
	for i, text := range texts {
		ix.Add(Doc{Seq: int64(i + 1), Role: "assistant", Text: text})
	}
	query := `sed -i '641a print(f"DEBUG: Package.collect {self.fspath}")' python.py`
	if hits := ix.Search(Query{Text: query, Limit: 3}); len(hits) < 2 || hits[0].Seq != 2 || hits[1].Seq != 5 {
		t.Fatalf("hits %+v, want the command's message (2), then its output (5)", hits)
	}
}

// A name counts once in a window: the shortest message that names a file
// ranks first, where the sum of both neighbours' shares put the messages
// of a run of edits to it ahead (each between two mentions).
func TestANameCountsOnceInAWindow(t *testing.T) {
	texts := []string{
		"the task: options of a parent command are ignored when a subcommand parses its own",
		"The parser is in src/cli/parser.go.", // 2: named first, shortest
		"1\tuse \"collections\"\n2\tclass CommandParser\n3\t  let _spec: CommandSpec box\n4\t  let _parent: (CommandParser box | None)",
	}
	for i := 0; i < 6; i++ {
		texts = append(texts,
			"I will replace the return of _parse_command in src/cli/parser.go with one that reads the parent's defaults first",
			"ERROR: No replacement was performed, old_str did not appear verbatim in src/cli/parser.go.")
	}
	ix := NewIndex()
	for i, text := range texts {
		ix.Add(Doc{Seq: int64(i + 1), Role: "assistant", Text: text})
	}
	if hits := ix.Search(Query{Text: "parser.go", Limit: 5}); len(hits) == 0 || hits[0].Seq != 2 {
		t.Fatalf("hits %+v, want the message that names it first and shortest (2) first", hits)
	}
}
