// Package schemas holds the JSON Schemas of the public contract: each
// event's data, the stored session record and message. They are embedded in
// the binary and compiled once.
package schemas

import (
	"bytes"
	"embed"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed *.json
var files embed.FS

// Names of the schemas, by file.
const (
	ContextRequest          = "context_request.json"
	CompactionCompleted     = "compaction_completed.json"
	CompactionFailed        = "compaction_failed.json"
	CompactionCircuitOpened = "compaction_circuit_opened.json"
	CompactionCircuitClosed = "compaction_circuit_closed.json"
	Message                 = "message.json"
	SessionRecord           = "session_record.json"
)

var (
	once     sync.Once
	compiled map[string]*jsonschema.Schema
	initErr  error
)

func compile() {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	entries, err := files.ReadDir(".")
	if err != nil {
		initErr = err
		return
	}
	compiled = map[string]*jsonschema.Schema{}
	for _, e := range entries {
		b, _ := files.ReadFile(e.Name())
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			initErr = fmt.Errorf("schemas: %s: %w", e.Name(), err)
			return
		}
		if err := c.AddResource("mem:///"+e.Name(), doc); err != nil {
			initErr = fmt.Errorf("schemas: %s: %w", e.Name(), err)
			return
		}
	}
	for _, e := range entries {
		s, err := c.Compile("mem:///" + e.Name())
		if err != nil {
			initErr = fmt.Errorf("schemas: %s: %w", e.Name(), err)
			return
		}
		compiled[e.Name()] = s
	}
}

// Validate checks a JSON document against the named schema. It returns an
// error saying which field is wrong.
func Validate(name string, doc []byte) error {
	once.Do(compile)
	if initErr != nil {
		return initErr
	}
	s, ok := compiled[name]
	if !ok {
		return fmt.Errorf("schemas: no schema %q", name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("does not match %s: %w", name, err)
	}
	return nil
}
