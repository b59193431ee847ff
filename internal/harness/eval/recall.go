package eval

import (
	"strings"

	"github.com/compactor/compactor/internal/recall"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
)

// RecallKs are the depths recall is measured at.
var RecallKs = []int{1, 5, 10}

// RecallReport is the recall measure of one conversation (or a total):
// for every LoCoMo question (the retention categories) whose evidence
// was summarised by the end of the replay, a search with the question's
// text (no model), and the evidence turns found within the snippets of
// its first k hits (a hit's snippet is the message and a neighbour each
// side).
type RecallReport struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Limit  int    `json:"context_limit"`
	// Questions are the questions with evidence; Summarised, those with
	// some of it summarised; Evidence, the summarised evidence turns.
	Questions  int `json:"questions"`
	Summarised int `json:"summarised_questions"`
	Evidence   int `json:"summarised_evidence"`
	// Found is, by k, the summarised evidence turns within the first k
	// hits' snippets; QuestionsFound, the questions with summarised
	// evidence all of whose summarised evidence is.
	Found          map[int]int `json:"found"`
	QuestionsFound map[int]int `json:"questions_found"`
	// Answerable are the questions whose every evidence turn is in the
	// final context or recalled within the first 5 hits.
	Answerable int `json:"answerable"`
}

// Share is Found[k] over Evidence (0 with no evidence).
func (r RecallReport) Share(k int) float64 {
	if r.Evidence == 0 {
		return 0
	}
	return float64(r.Found[k]) / float64(r.Evidence)
}

// QuestionShare is QuestionsFound[k] over Summarised.
func (r RecallReport) QuestionShare(k int) float64 {
	if r.Summarised == 0 {
		return 0
	}
	return float64(r.QuestionsFound[k]) / float64(r.Summarised)
}

// AnswerableShare is Answerable over Questions.
func (r RecallReport) AnswerableShare() float64 {
	if r.Questions == 0 {
		return 0
	}
	return float64(r.Answerable) / float64(r.Questions)
}

// Add sums o into r.
func (r *RecallReport) Add(o RecallReport) {
	r.Questions += o.Questions
	r.Summarised += o.Summarised
	r.Evidence += o.Evidence
	r.Answerable += o.Answerable
	if r.Found == nil {
		r.Found, r.QuestionsFound = map[int]int{}, map[int]int{}
	}
	for k, n := range o.Found {
		r.Found[k] += n
	}
	for k, n := range o.QuestionsFound {
		r.QuestionsFound[k] += n
	}
}

// Docs are a conversation's messages as the index reads them (seq i+1
// for message i).
func Docs(msgs []session.Message) []recall.Doc {
	out := make([]recall.Doc, len(msgs))
	for i := range msgs {
		out[i] = recall.DocOf(&msgs[i])
		out[i].Seq = int64(i + 1)
	}
	return out
}

// MeasureRecall searches c's questions on an index of all its messages,
// summarised(i) saying which message index the final context summarised.
func MeasureRecall(c transcript.Conversation, limit int, summarised func(i int) bool) RecallReport {
	rep := RecallReport{Name: c.Name, Source: c.Source, Limit: limit, Found: map[int]int{}, QuestionsFound: map[int]int{}}
	ix := recall.NewIndex()
	for _, d := range Docs(c.Messages) {
		ix.Add(d)
	}
	maxK := RecallKs[len(RecallKs)-1]
	for _, q := range c.QA {
		if !Categories[q.Category] || strings.TrimSpace(q.Answer) == "" {
			continue
		}
		idx := evidenceIndices(c, q.Evidence)
		if len(idx) == 0 {
			continue
		}
		rep.Questions++
		hits := ix.Search(recall.Query{Text: q.Question, Limit: maxK})
		at := func(i, k int) bool {
			for _, h := range hits[:min(k, len(hits))] {
				if d := int64(i+1) - h.Seq; d >= -1 && d <= 1 {
					return true
				}
			}
			return false
		}
		answerable, some := true, false
		all := map[int]bool{}
		for _, k := range RecallKs {
			all[k] = true
		}
		for _, i := range idx {
			if !summarised(i) {
				continue
			}
			some = true
			rep.Evidence++
			for _, k := range RecallKs {
				if at(i, k) {
					rep.Found[k]++
				} else {
					all[k] = false
				}
			}
			answerable = answerable && at(i, 5)
		}
		if some {
			rep.Summarised++
			for _, k := range RecallKs {
				if all[k] {
					rep.QuestionsFound[k]++
				}
			}
		}
		if answerable {
			rep.Answerable++
		}
	}
	return rep
}

// AgentRecall is the recall of an agent run's artifacts: every file,
// command and error probe (BuildProbes) whose message the final context
// summarised, searched by its text (a file's name, a command whole, an
// error's line); found when its message is within the snippets of the
// first 5 hits.
type AgentRecall struct {
	Name   string           `json:"name"`
	Source string           `json:"source"`
	Limit  int              `json:"context_limit"`
	Scores map[string]Tally `json:"scores"`
	// Missed lists probes not found (at most 20).
	Missed []Probe `json:"missed,omitempty"`
}

// Add sums o into r.
func (r *AgentRecall) Add(o AgentRecall) {
	if r.Scores == nil {
		r.Scores = map[string]Tally{}
	}
	for k, t := range o.Scores {
		r.Scores[k] = r.Scores[k].add(t)
	}
	for _, p := range o.Missed {
		if len(r.Missed) < 20 {
			r.Missed = append(r.Missed, p)
		}
	}
}

// Total is every kind's tally summed.
func (r AgentRecall) Total() Tally {
	var t Tally
	for _, s := range r.Scores {
		t = t.add(s)
	}
	return t
}

// MeasureAgentRecall searches c's file, command and error probes on an
// index of all its messages.
func MeasureAgentRecall(c transcript.Conversation, limit int, summarised func(i int) bool) AgentRecall {
	rep := AgentRecall{Name: c.Name, Source: c.Source, Limit: limit, Scores: map[string]Tally{}}
	ix := recall.NewIndex()
	for _, d := range Docs(c.Messages) {
		ix.Add(d)
	}
	for _, p := range BuildProbes(c) {
		if p.Kind != ProbeFiles && p.Kind != ProbeCommands && p.Kind != ProbeErrors || !summarised(p.Msg) {
			continue
		}
		t := rep.Scores[p.Kind]
		t.Checks++
		found := false
		for _, h := range ix.Search(recall.Query{Text: p.Text, Limit: 5}) {
			if d := int64(p.Msg+1) - h.Seq; d >= -1 && d <= 1 {
				found = true
				break
			}
		}
		if found {
			t.Kept++
		} else if len(rep.Missed) < 20 {
			rep.Missed = append(rep.Missed, p)
		}
		rep.Scores[p.Kind] = t
	}
	return rep
}
