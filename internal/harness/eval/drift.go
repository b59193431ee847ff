package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// The drift suite (compactor eval drift): made agent sessions with
// planted facts that must survive every compaction of a long run — a
// locked decision, a forbidden action, an instruction a later one
// supersedes, a tracked plan whose items finish one by one, and a focus
// text the requests carry with a fact about it — compacted incrementally
// many times in a row. Each is scored by presence (still said after
// every compaction that summarised it) and by contradiction (a superseded
// instruction stated as current, a finished plan item stated as pending).
// The sessions vary by seed: phrasing, values, tool vocabulary (Claude
// Code, OpenHands), plan tool (TodoWrite, update_plan, task_tracker),
// output sizes and length; nothing is tuned to one.

// Drift scores.
const (
	DriftLocked     = "locked_decision"
	DriftForbidden  = "forbidden_action"
	DriftLatest     = "latest_instruction"
	DriftFocus      = "focus"
	DriftPlanStatus = "plan_status" // the finished items of the last plan summarised, stated finished
)

// DriftKinds lists the presence scores in report order.
var DriftKinds = []string{DriftLocked, DriftForbidden, DriftLatest, DriftFocus, DriftPlanStatus}

// DriftCase is one made session and what it planted.
type DriftCase struct {
	Conv  transcript.Conversation
	Focus string
	// Plants are what the context must still say once their message is
	// summarised, by kind.
	Plants []DriftPlant
	// Superseded is the instruction a later one replaced (at Replaced).
	Superseded string
	Replaced   int
	// Plans are the planning calls: message index and items by status.
	Plans []driftPlan
}

// DriftPlant is one planted fact: the message it is in and the texts the
// context must hold (normalised by norm), all of them.
type DriftPlant struct {
	Kind string   `json:"kind"`
	Msg  int      `json:"msg"`
	Want []string `json:"want"`
}

type driftPlan struct {
	msg   int
	items []string
	done  []bool
}

// DriftReport is one case replayed, or the sum of several.
type DriftReport struct {
	Name string `json:"name"`
	// Cases is how many sessions the report sums.
	Cases    int `json:"cases"`
	Limit    int `json:"context_limit"`
	Messages int `json:"messages"`
	// Compactions counts those that summarised (a compaction that only
	// cleared tool results changes no summary).
	Compactions int              `json:"compactions"`
	Failures    int              `json:"failures"`
	Scores      map[string]Tally `json:"scores"`
	// SupersededCurrent counts compactions whose summary states the
	// superseded instruction as current; DonePending, finished plan items
	// the summary states as pending or open.
	SupersededCurrent int `json:"superseded_stated_current"`
	DonePending       int `json:"done_items_stated_pending"`
	// MinCompactions is the fewest compactions of one case (the suite
	// asks three or more).
	MinCompactions int          `json:"min_compactions"`
	Missed         []DriftPlant `json:"missed,omitempty"`
}

// Add sums o into r.
func (r *DriftReport) Add(o DriftReport) {
	if r.Scores == nil {
		r.Scores = map[string]Tally{}
	}
	for k, t := range o.Scores {
		r.Scores[k] = r.Scores[k].add(t)
	}
	if r.Compactions == 0 && r.Messages == 0 || o.MinCompactions < r.MinCompactions {
		r.MinCompactions = o.MinCompactions
	}
	r.Cases += o.Cases
	r.Messages += o.Messages
	r.Compactions += o.Compactions
	r.Failures += o.Failures
	r.SupersededCurrent += o.SupersededCurrent
	r.DonePending += o.DonePending
	for _, m := range o.Missed {
		if len(r.Missed) < 20 {
			r.Missed = append(r.Missed, m)
		}
	}
}

// DriftGoals are the presence scores the suite's goals hold at 100 %
// (a finished item's status, DriftPlanStatus, is reported: at a small
// budget the working state shows the newest items of a long plan).
var DriftGoals = []string{DriftLocked, DriftForbidden, DriftLatest, DriftFocus}

// Met reports whether r meets the suite's goals: DriftGoals' scores
// 100 %, no contradiction, no failed compaction, three compactions or
// more in every case.
func (r DriftReport) Met() bool {
	for _, k := range DriftGoals {
		if t := r.Scores[k]; t.Kept != t.Checks {
			return false
		}
	}
	return r.SupersededCurrent == 0 && r.DonePending == 0 && r.Failures == 0 && r.MinCompactions >= 3
}

// DriftReplay replays c on loop at limit, compacting incrementally with
// c's focus whenever the context is over the limit, and scores it after
// every compaction.
func DriftReplay(ctx context.Context, loop *MemoryLoop, c DriftCase, counter *tokens.Counter, cfg pipeline.Config, limit int) (DriftReport, error) {
	rep := DriftReport{Name: c.Conv.Name, Cases: 1, Limit: limit, Messages: len(c.Conv.Messages), Scores: map[string]Tally{}}
	loop.Focus = c.Focus
	out, err := replay(ctx, loop, c.Conv, counter, cfg, limit, func(view []session.Message, tail int64, res *pipeline.Result) error {
		if res.MessagesSummarised > 0 {
			rep.Compactions++
			c.score(&rep, view, tail)
		}
		return nil
	})
	rep.Failures, rep.MinCompactions = out.Failures, rep.Compactions
	return rep, err
}

// score checks one compacted context (tail: the seq of its first raw
// message; a message of index i has seq i+1).
func (c DriftCase) score(rep *DriftReport, view []session.Message, tail int64) {
	summarised := func(i int) bool { return int64(i+1) < tail }
	text := norm(contextText(view))
	for _, p := range c.Plants {
		if !summarised(p.Msg) {
			continue
		}
		t := rep.Scores[p.Kind]
		t.Checks++
		kept := true
		for _, w := range p.Want {
			kept = kept && strings.Contains(text, w)
		}
		if kept {
			t.Kept++
		} else if len(rep.Missed) < 20 {
			rep.Missed = append(rep.Missed, p)
		}
		rep.Scores[p.Kind] = t
	}
	var sum *summary.Summary
	for _, m := range view {
		if m.IsCompaction && m.Compaction != nil {
			sum, _ = summary.Parse(m.Compaction.SummaryText)
		}
	}
	if sum == nil {
		return
	}
	if c.Superseded != "" && summarised(c.Replaced) {
		old := norm(strings.TrimRight(c.Superseded, "."))
		for _, b := range sum.Sections[summary.Instructions] {
			if nb := norm(b); strings.Contains(nb, old) && !strings.Contains(nb, "superseded") {
				rep.SupersededCurrent++
			}
		}
	}
	c.scorePlan(rep, sum, summarised)
}

// scorePlan checks the last plan summarised: its finished items stated
// finished in the working state, none of them stated pending there or
// named under the open tasks.
func (c DriftCase) scorePlan(rep *DriftReport, sum *summary.Summary, summarised func(int) bool) {
	var last *driftPlan
	for i := range c.Plans {
		if summarised(c.Plans[i].msg) {
			last = &c.Plans[i]
		}
	}
	if last == nil {
		return
	}
	state := sum.Sections[summary.State]
	for j, item := range last.items {
		if !last.done[j] {
			continue
		}
		it := norm(item)
		t := rep.Scores[DriftPlanStatus]
		t.Checks++
		finished := false
		for _, b := range state {
			nb := norm(b)
			if !strings.HasSuffix(nb, "] "+it) {
				continue
			}
			if strings.HasPrefix(nb, "["+ledger.PlanDone+"]") {
				finished = true
			} else {
				rep.DonePending++
			}
		}
		for _, b := range sum.Sections[summary.OpenTasks] {
			if strings.Contains(norm(b), it) {
				rep.DonePending++
			}
		}
		if finished {
			t.Kept++
		} else if len(rep.Missed) < 20 {
			rep.Missed = append(rep.Missed, DriftPlant{Kind: DriftPlanStatus, Msg: last.msg, Want: []string{"[" + ledger.PlanDone + "] " + it}})
		}
		rep.Scores[DriftPlanStatus] = t
	}
}

// DriftCases makes n sessions from seed (the same seed, the same
// sessions).
func DriftCases(n int, seed uint64) []DriftCase {
	out := make([]DriftCase, n)
	for i := range out {
		out[i] = makeDrift(i, rand.New(rand.NewPCG(seed, uint64(i))))
	}
	return out
}

var (
	driftTasks = []string{
		"Add rate limiting to the public HTTP API of the billing service and cover it with tests.",
		"Migrate the report exporter from the legacy CSV writer to the streaming writer without changing its output.",
		"Fix the race in the job scheduler that runs a job twice when two workers start at once.",
		"Split the monolithic config loader into a parser and a validator, keeping every error message as it is.",
	}
	driftLocked = []struct{ text, want string }{
		{"Decision, and it is final: the datastore stays %s; do not propose another one.", "%s"},
		{"We decided to keep %s as the database. That is locked, please do not revisit it.", "%s"},
		{"Locked decision: every new table goes into %s, nowhere else.", "%s"},
	}
	driftStores    = []string{"PostgreSQL 16", "SQLite 3.45", "MariaDB 11.4", "CockroachDB 24.1"}
	driftForbidden = []string{
		"Never run `git push --force` on this repository.",
		"Do not modify anything under the vendor/ directory.",
		"Never delete the migrations in db/migrations, even old ones.",
		"Do not call the production payment API from tests.",
	}
	driftOld = []struct{ old, new string }{
		{"Write every commit message in French.", "Actually, from now on write every commit message in English instead of French."},
		{"Use tabs for indentation in the new files.", "Change of plan: use four spaces for indentation in the new files instead of tabs."},
		{"Log at debug level while we investigate the scheduler.", "From now on log at info level in the scheduler instead of debug level."},
	}
	driftFocus = []struct{ focus, fact, code, detail string }{
		{"the flaky payment retry", "The flaky payment retry fails with error code %s after %d attempts; keep that in mind.", "PAY-%d", "%d attempts"},
		{"the nightly export timeout", "The nightly export times out with code %s once it passes %d rows.", "EXP-%d", "%d rows"},
		{"the login throttling bug", "The login throttling bug shows as %s when more than %d requests arrive in a second.", "AUTH-%d", "%d requests"},
	}
	driftPlanItems = []string{
		"Reproduce the problem with a failing test", "Read the module and its callers", "Write the fix", "Add regression tests",
		"Update the documentation", "Run the whole test suite", "Clean up the debug logging", "Write the changelog entry",
	}
	driftWords = strings.Fields("request handler worker queue token limit bucket window retry backoff config parser schema " +
		"record writer stream buffer flush commit session cache index shard lease timeout deadline context error value field")
)

// makeDrift makes case i.
func makeDrift(i int, r *rand.Rand) DriftCase {
	b := &driftBuilder{r: r, claude: r.IntN(2) == 0}
	c := DriftCase{}
	b.add(session.Message{Role: session.RoleSystem, Content: session.TextContent("You are a careful software agent working in a git repository. Use the tools to read, edit and test code.")})
	b.add(session.Message{Role: session.RoleUser, Content: session.TextContent(driftTasks[r.IntN(len(driftTasks))])})
	b.step()
	store := driftStores[r.IntN(len(driftStores))]
	locked := driftLocked[r.IntN(len(driftLocked))]
	forbidden := driftForbidden[r.IntN(len(driftForbidden))]
	old := driftOld[r.IntN(len(driftOld))]
	at := b.add(session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf(locked.text, store) + " " + forbidden + " " + old.old)})
	c.Plants = append(c.Plants,
		DriftPlant{Kind: DriftLocked, Msg: at, Want: []string{norm(store)}},
		DriftPlant{Kind: DriftForbidden, Msg: at, Want: []string{norm(strings.TrimRight(forbidden, "."))}})
	c.Superseded = old.old
	items := slices5(r)
	done := make([]bool, len(items))
	steps := 50 + r.IntN(30)
	focusAt, supersedeAt := 6+r.IntN(5), 12+r.IntN(6)
	planEvery := max(3, steps/len(items)-1)
	for s := 0; s < steps; s++ {
		if s == 1 || s > 1 && s%planEvery == 0 {
			if s > 1 {
				for j := range done {
					if !done[j] {
						done[j] = true
						break
					}
				}
			}
			c.Plans = append(c.Plans, driftPlan{msg: b.plan(items, done), items: items, done: append([]bool(nil), done...)})
		}
		if s == focusAt {
			f := driftFocus[r.IntN(len(driftFocus))]
			code, n := fmt.Sprintf(f.code, 1000+r.IntN(9000)), 3+r.IntN(40)
			at := b.add(session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf(f.fact, code, n))})
			c.Focus = f.focus
			c.Plants = append(c.Plants, DriftPlant{Kind: DriftFocus, Msg: at, Want: []string{norm(code), norm(fmt.Sprintf(f.detail, n))}})
		}
		if s == supersedeAt {
			at := b.add(session.Message{Role: session.RoleUser, Content: session.TextContent(old.new)})
			c.Replaced = at
			c.Plants = append(c.Plants, DriftPlant{Kind: DriftLatest, Msg: at, Want: []string{norm(strings.TrimRight(old.new, "."))}})
		}
		b.step()
	}
	c.Conv = transcript.Conversation{Name: fmt.Sprintf("drift-%02d", i), Source: "drift", Messages: b.msgs}
	return c
}

// slices5 picks five plan items in their order.
func slices5(r *rand.Rand) []string {
	start := r.IntN(len(driftPlanItems) - 4)
	return append([]string(nil), driftPlanItems[start:start+5]...)
}

// driftBuilder appends a made session's messages.
type driftBuilder struct {
	r      *rand.Rand
	claude bool // Claude Code's tools, else OpenHands'
	msgs   []session.Message
	calls  int
}

func (b *driftBuilder) add(m session.Message) int {
	m.ID, m.Seq = fmt.Sprintf("m%d", len(b.msgs)+1), int64(len(b.msgs)+1)
	b.msgs = append(b.msgs, m)
	return len(b.msgs) - 1
}

// call adds an assistant's tool call and its result.
func (b *driftBuilder) call(thought, name string, args any, result string) int {
	b.calls++
	id := fmt.Sprintf("call_%d", b.calls)
	raw, _ := json.Marshal(args)
	at := b.add(session.Message{Role: session.RoleAssistant, Content: session.TextContent(thought),
		ToolCalls: []session.ToolCall{{ID: id, Type: "function", Function: session.FunctionCall{Name: name, Arguments: string(raw)}}}})
	b.add(session.Message{Role: session.RoleTool, ToolCallID: id, Name: name, Content: session.TextContent(result)})
	return at
}

// step is one unit of work: a file read, a command run or an edit, with
// an output of a few hundred tokens.
func (b *driftBuilder) step() {
	file := fmt.Sprintf("internal/%s/%s.go", b.word(), b.word())
	switch b.r.IntN(3) {
	case 0:
		if b.claude {
			b.call("Let me read "+file+".", "Read", map[string]any{"file_path": "/repo/" + file}, b.code(20+b.r.IntN(60)))
		} else {
			b.call("Let me view "+file+".", "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/" + file}, b.code(20+b.r.IntN(60)))
		}
	case 1:
		cmd := fmt.Sprintf("go test ./internal/%s/... -run Test%s", b.word(), title(b.word()))
		name, args := "Bash", map[string]any{"command": cmd}
		if !b.claude {
			name = "execute_bash"
		}
		b.call("Running the tests.", name, args, b.log(10+b.r.IntN(50)))
	default:
		if b.claude {
			b.call("Editing "+file+".", "Edit", map[string]any{"file_path": "/repo/" + file, "old_string": b.word(), "new_string": b.word()}, "The file /repo/"+file+" has been updated.")
		} else {
			b.call("Editing "+file+".", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/workspace/" + file, "old_str": b.word(), "new_str": b.word()}, "The file /workspace/"+file+" has been edited.")
		}
	}
}

// plan adds a planning call of the vocabulary's tool with items, the
// first unfinished one in progress, and returns its message's index.
func (b *driftBuilder) plan(items []string, done []bool) int {
	status := func(j int) string {
		switch {
		case done[j]:
			return "completed"
		case j == 0 || done[j-1]:
			return "in_progress"
		}
		return "pending"
	}
	var list []map[string]any
	for j, it := range items {
		switch {
		case b.claude:
			list = append(list, map[string]any{"content": it, "status": status(j), "activeForm": it})
		default:
			list = append(list, map[string]any{"title": it, "status": status(j)})
		}
	}
	if b.claude {
		return b.call("Updating the plan.", "TodoWrite", map[string]any{"todos": list}, "Todos have been modified successfully.")
	}
	return b.call("Updating the plan.", "task_tracker", map[string]any{"command": "plan", "task_list": list}, "Task list has been updated.")
}

func (b *driftBuilder) word() string { return driftWords[b.r.IntN(len(driftWords))] }

// code is n lines of Go-like source.
func (b *driftBuilder) code(n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "%d\tfunc (s *%s) %s%s(ctx context.Context, %s int) error { return s.%s.%s(ctx) }\n",
			i+1, title(b.word()), title(b.word()), title(b.word()), b.word(), b.word(), title(b.word()))
	}
	return sb.String()
}

// log is n lines of test output, passing.
func (b *driftBuilder) log(n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "=== RUN   Test%s/%s_%s\n--- PASS: Test%s/%s_%s (0.%02ds)\n", title(b.word()), b.word(), b.word(),
			title(b.word()), b.word(), b.word(), b.r.IntN(100))
	}
	sb.WriteString("PASS\nok  \tgithub.com/example/repo/internal/" + b.word() + "\t0.412s\n")
	return sb.String()
}

// title is w with its first letter upper-case (ASCII words).
func title(w string) string {
	if w == "" {
		return w
	}
	return strings.ToUpper(w[:1]) + w[1:]
}
