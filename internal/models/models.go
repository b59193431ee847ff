// Package models is the shipped table of model facts the compactor needs:
// context window, tiktoken encoding, output limit and provider. Lookups
// accept dated and suffixed names ("gpt-4o-2024-08-06") by longest prefix;
// unknown names are accepted with conservative defaults, since compatible
// servers serve any name. A Table can be extended or overridden from config.
package models

import (
	"fmt"
	"sort"
	"strings"
)

// Encodings supported by the embedded tiktoken loader.
const (
	O200kBase  = "o200k_base"
	CL100kBase = "cl100k_base"
)

// Defaults for a model the table does not know.
const (
	// DefaultContextLimit is deliberately small: a wrong guess on the low
	// side costs an early compaction, on the high side a failed model call.
	DefaultContextLimit = 8192
	// DefaultEncoding estimates counts for models without a tiktoken
	// encoding of their own; cl100k_base counts slightly more tokens than
	// o200k_base on English text, which errs on the safe side.
	DefaultEncoding = CL100kBase
)

// Info describes one model.
type Info struct {
	Name          string `json:"name"`
	Provider      string `json:"provider,omitempty"`
	ContextWindow int    `json:"context_window"`
	MaxOutput     int    `json:"max_output,omitempty"`
	Encoding      string `json:"encoding"`
	// MaxCompletionTokens is set for OpenAI models that reject max_tokens
	// and need max_completion_tokens (reasoning models).
	MaxCompletionTokens bool `json:"max_completion_tokens,omitempty"`
	// Known is false for a name the table answered with defaults.
	Known bool `json:"-"`
}

var shipped = []Info{
	{Name: "gpt-5", Provider: "openai", ContextWindow: 400000, MaxOutput: 128000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "gpt-5-mini", Provider: "openai", ContextWindow: 400000, MaxOutput: 128000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "gpt-5-nano", Provider: "openai", ContextWindow: 400000, MaxOutput: 128000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "gpt-4.1", Provider: "openai", ContextWindow: 1047576, MaxOutput: 32768, Encoding: O200kBase},
	{Name: "gpt-4.1-mini", Provider: "openai", ContextWindow: 1047576, MaxOutput: 32768, Encoding: O200kBase},
	{Name: "gpt-4.1-nano", Provider: "openai", ContextWindow: 1047576, MaxOutput: 32768, Encoding: O200kBase},
	{Name: "gpt-4o", Provider: "openai", ContextWindow: 128000, MaxOutput: 16384, Encoding: O200kBase},
	{Name: "gpt-4o-mini", Provider: "openai", ContextWindow: 128000, MaxOutput: 16384, Encoding: O200kBase},
	{Name: "o1", Provider: "openai", ContextWindow: 200000, MaxOutput: 100000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "o3", Provider: "openai", ContextWindow: 200000, MaxOutput: 100000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "o3-mini", Provider: "openai", ContextWindow: 200000, MaxOutput: 100000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "o4-mini", Provider: "openai", ContextWindow: 200000, MaxOutput: 100000, Encoding: O200kBase, MaxCompletionTokens: true},
	{Name: "gpt-4-turbo", Provider: "openai", ContextWindow: 128000, MaxOutput: 4096, Encoding: CL100kBase},
	{Name: "gpt-4", Provider: "openai", ContextWindow: 8192, MaxOutput: 8192, Encoding: CL100kBase},
	{Name: "gpt-4-32k", Provider: "openai", ContextWindow: 32768, MaxOutput: 8192, Encoding: CL100kBase},
	{Name: "gpt-3.5-turbo", Provider: "openai", ContextWindow: 16385, MaxOutput: 4096, Encoding: CL100kBase},
	{Name: "claude-opus-4-1", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 32000, Encoding: CL100kBase},
	{Name: "claude-opus-4", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 32000, Encoding: CL100kBase},
	{Name: "claude-sonnet-4-5", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 64000, Encoding: CL100kBase},
	{Name: "claude-sonnet-4", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 64000, Encoding: CL100kBase},
	{Name: "claude-haiku-4-5", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 64000, Encoding: CL100kBase},
	{Name: "claude-3-7-sonnet", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 64000, Encoding: CL100kBase},
	{Name: "claude-3-5-haiku", Provider: "anthropic", ContextWindow: 200000, MaxOutput: 8192, Encoding: CL100kBase},
	{Name: "extractive", Provider: "extractive", ContextWindow: 1 << 20, MaxOutput: 1 << 20, Encoding: O200kBase},
}

// Table maps model names to their facts. The zero value is empty; use
// Default for the shipped table. A Table is read-only after construction
// and safe for concurrent use.
type Table struct {
	byName map[string]Info
	names  []string // sorted by length, longest first, for prefix lookups
}

// Default returns the shipped table.
func Default() *Table {
	t, err := NewTable(shipped)
	if err != nil {
		panic(err) // the shipped table is a constant; a bad entry is a build bug
	}
	return t
}

// NewTable builds a table from entries. Later entries override earlier ones
// with the same name. It returns an error for an entry with no name, a
// non-positive context window or an unsupported encoding.
func NewTable(entries []Info) (*Table, error) {
	t := &Table{byName: make(map[string]Info, len(entries))}
	for _, e := range entries {
		if err := e.validate(); err != nil {
			return nil, err
		}
		e.Known = true
		if _, dup := t.byName[e.Name]; !dup {
			t.names = append(t.names, e.Name)
		}
		t.byName[e.Name] = e
	}
	sort.SliceStable(t.names, func(i, j int) bool { return len(t.names[i]) > len(t.names[j]) })
	return t, nil
}

// With returns a copy of t with entries added or replaced.
func (t *Table) With(entries ...Info) (*Table, error) {
	all := make([]Info, 0, len(t.byName)+len(entries))
	for _, n := range t.names {
		all = append(all, t.byName[n])
	}
	return NewTable(append(all, entries...))
}

func (e Info) validate() error {
	if e.Name == "" {
		return fmt.Errorf("models: entry without a name")
	}
	if e.ContextWindow <= 0 {
		return fmt.Errorf("models: %s: context_window must be positive", e.Name)
	}
	if !SupportedEncoding(e.Encoding) {
		return fmt.Errorf("models: %s: encoding %q is not one of %s, %s", e.Name, e.Encoding, O200kBase, CL100kBase)
	}
	return nil
}

// SupportedEncoding reports whether name is an encoding the embedded loader
// ships.
func SupportedEncoding(name string) bool {
	switch name {
	case O200kBase, CL100kBase, "p50k_base", "r50k_base":
		return true
	}
	return false
}

// Lookup returns the facts for a model: the exact entry, else the longest
// entry that is a prefix followed by '-' (dated or suffixed names), else
// defaults with Known false. A provider prefix such as "openai/" is ignored.
func (t *Table) Lookup(name string) Info {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		if info, ok := t.lookup(name[i+1:]); ok {
			return info
		}
	}
	if info, ok := t.lookup(name); ok {
		return info
	}
	return Info{Name: name, ContextWindow: DefaultContextLimit, Encoding: DefaultEncoding}
}

func (t *Table) lookup(name string) (Info, bool) {
	if info, ok := t.byName[name]; ok {
		return info, true
	}
	for _, n := range t.names {
		if strings.HasPrefix(name, n+"-") {
			info := t.byName[n]
			info.Name = name
			return info, true
		}
	}
	return Info{}, false
}
