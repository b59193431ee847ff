// Package summary owns the summary template: the fixed headings a summary
// must have, and parsing, rendering, validating and merging summaries in that
// format. Every summariser (model or extractive) writes it and the pipeline
// reads it, so a summary is easy to parse and to extend incrementally.
package summary

import (
	"errors"
	"fmt"
	"strings"
)

// Section names, in template order.
const (
	Goal         = "Goal"
	Instructions = "User instructions"
	Decisions    = "Decisions"
	Facts        = "Facts and identifiers"
	Files        = "Files and artifacts"
	Errors       = "Errors and fixes"
	OpenTasks    = "Open tasks"
)

// Headings lists the template's sections, every one of which a summariser
// writes, in the order they are rendered.
var Headings = []string{Goal, Instructions, Decisions, Facts, Files, Errors, OpenTasks}

// State is the working state's section: what the agent was doing (its
// task, plan and each item's status, approvals, calls in flight, the file
// being edited, the last command), written by the service from the
// messages, never by a summariser. It is rendered first, and only when it
// has bullets; Merge leaves it out (each compaction writes it anew).
const State = "Working state"

// All lists every section a summary may hold, in render order.
var All = append([]string{State}, Headings...)

// None is the bullet an empty section carries, so that every heading is
// present and a reader can tell "nothing" from "missing".
const None = "(none)"

// Errors returned by Validate.
var (
	// ErrEmpty is returned for an empty or whitespace-only summary.
	ErrEmpty = errors.New("summary is empty")
	// ErrMissingHeadings is returned when a template heading is absent.
	ErrMissingHeadings = errors.New("summary is missing template headings")
	// ErrNotSummary is returned for text that is a refusal or an error
	// message rather than a summary.
	ErrNotSummary = errors.New("text is not a summary")
)

// Summary is a parsed summary: bullets per section. Sections not in the
// template are dropped by Parse.
type Summary struct {
	Sections map[string][]string
}

// New returns an empty summary.
func New() *Summary { return &Summary{Sections: map[string][]string{}} }

// Add appends a bullet to a section, unless the section already has it.
func (s *Summary) Add(section, bullet string) {
	bullet = strings.TrimSpace(bullet)
	if bullet == "" || bullet == None {
		return
	}
	for _, b := range s.Sections[section] {
		if b == bullet {
			return
		}
	}
	s.Sections[section] = append(s.Sections[section], bullet)
}

// Bullets returns the number of bullets across all sections.
func (s *Summary) Bullets() int {
	n := 0
	for _, b := range s.Sections {
		n += len(b)
	}
	return n
}

// Render writes the summary in template form: every heading, in order, with
// its bullets or "- (none)".
func (s *Summary) Render() string {
	var sb strings.Builder
	for _, h := range All {
		if h == State && len(s.Sections[h]) == 0 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString("## ")
		sb.WriteString(h)
		sb.WriteByte('\n')
		bullets := s.Sections[h]
		if len(bullets) == 0 {
			sb.WriteString("- " + None + "\n")
			continue
		}
		for _, b := range bullets {
			sb.WriteString("- ")
			sb.WriteString(strings.ReplaceAll(b, "\n", " "))
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// canonical maps a heading line's text to a template heading, tolerating
// case, trailing colons and markdown emphasis.
func canonical(h string) (string, bool) {
	h = strings.Trim(strings.TrimSpace(h), "*_:# ")
	for _, want := range All {
		if strings.EqualFold(h, want) {
			return want, true
		}
	}
	return "", false
}

// Parse reads a summary in template form. Headings may be "## Name" or
// "# Name" or "**Name**"; bullets start with "-", "*" or "•"; other
// non-empty lines continue the previous bullet. It reports which template
// headings it found.
func Parse(text string) (s *Summary, found map[string]bool) {
	s = New()
	found = map[string]bool{}
	section := ""
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, "#") || (strings.HasPrefix(t, "**") && strings.HasSuffix(strings.TrimSuffix(t, ":"), "**")) {
			if h, ok := canonical(t); ok {
				section = h
				found[h] = true
				continue
			}
			if strings.HasPrefix(t, "#") { // a heading outside the template
				section = ""
				continue
			}
		}
		if section == "" {
			continue
		}
		if b, ok := cutBullet(t); ok {
			s.Add(section, b)
			continue
		}
		// A continuation line joins the section's last bullet.
		if bs := s.Sections[section]; len(bs) > 0 {
			bs[len(bs)-1] += " " + t
		} else {
			s.Add(section, t)
		}
	}
	return s, found
}

func cutBullet(t string) (string, bool) {
	for _, p := range []string{"- ", "* ", "• "} {
		if strings.HasPrefix(t, p) {
			return strings.TrimSpace(t[len(p):]), true
		}
	}
	return "", false
}

// refusals are openings of answers that are not summaries.
var refusals = []string{
	"i'm sorry", "i am sorry", "sorry, i", "i cannot", "i can't", "i can not", "i won't", "i will not",
	"as an ai", "i'm unable", "i am unable", "error:", "{\"error\"", "<!doctype html", "<html",
}

// Validate checks that text is a usable summary: not empty, not a refusal or
// an error text, and with every template heading. It returns ErrEmpty,
// ErrNotSummary or ErrMissingHeadings (naming the missing ones).
func Validate(text string) error {
	t := strings.TrimSpace(text)
	if t == "" {
		return ErrEmpty
	}
	low := strings.ToLower(t)
	for _, r := range refusals {
		if strings.HasPrefix(low, r) {
			return fmt.Errorf("%w: it begins %q", ErrNotSummary, t[:min(len(t), 60)])
		}
	}
	s, found := Parse(t)
	var missing []string
	for _, h := range Headings {
		if !found[h] {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingHeadings, strings.Join(missing, ", "))
	}
	if s.Bullets() == 0 {
		return fmt.Errorf("%w: no bullet under any heading", ErrEmpty)
	}
	return nil
}

// Merge appends delta's bullets to base section by section, skipping
// bullets base already has, and returns a new summary without a working
// state; the inputs are not changed. This is the incremental step: the existing summary stays as it
// was and the new messages' facts follow it.
func Merge(base, delta *Summary) *Summary {
	out := New()
	for _, src := range []*Summary{base, delta} {
		if src == nil {
			continue
		}
		for _, h := range Headings {
			for _, b := range src.Sections[h] {
				out.Add(h, b)
			}
		}
	}
	return out
}
