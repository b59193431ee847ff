package pipeline

import (
	"testing"

	"github.com/compactor/compactor/internal/session"
)

// What counts as the user's words: whole words, quotes and spacing and
// case aside, and never a negated instruction without its negation.
func TestVerbatim(t *testing.T) {
	src := instructionSources(nil, []session.Message{
		{Role: session.RoleUser, Content: session.TextContent("Never push to main directly. Don't delete the logs; keep the importer's “public” API.")},
		{Role: session.RoleAssistant, Content: session.TextContent("Always deploy on Fridays.")},
	}, nil)
	for bullet, want := range map[string]bool{
		"Never push to main directly.":                           true,
		"user: don't  delete the logs":                           true,
		`The user said: "keep the importer's 'public' API"`:      true,
		"Keep the importer's \"public\" API.":                    true,
		"Push to main directly.":                                 false, // the negation left out
		"Delete the logs.":                                       false,
		"Keep the import":                                        false, // a word cut
		"Always deploy on Fridays.":                              false, // the assistant said it
		"Never push to main directly. Always deploy on Fridays.": false,
	} {
		if got := src.verbatim(bullet); got != want {
			t.Errorf("%q: %v, want %v", bullet, got, want)
		}
	}
}
