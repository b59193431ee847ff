// Package schemas holds the JSON Schemas of the public contract: each
// event's data, the stored session record and message. They are embedded in
// the binary and compiled once.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/compactor/compactor/contract"
)

//go:embed *.json
var files embed.FS

// Names of the schemas, by file.
const (
	ContextRequest          = contract.SchemaContextRequest
	CompactionCompleted     = contract.SchemaCompactionCompleted
	CompactionFailed        = contract.SchemaCompactionFailed
	CompactionCircuitOpened = contract.SchemaCompactionCircuitOpened
	CompactionCircuitClosed = contract.SchemaCompactionCircuitClosed
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
		return describe(err)
	}
	return nil
}

// describe turns a validation error into what a caller can act on: each
// wrong field by its JSON name and what is wrong with it ("context_limit:
// got string, want integer; unknown field 'context_limt'"), without the
// validator's schema URIs. When a field fails its own schema, no field is
// reported unknown by unevaluatedProperties: a failed subschema evaluates
// none of its properties, so every field of the body would be (a
// misspelt one is reported once the others are right).
func describe(err error) error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	type problem struct{ field, msg string }
	var found []problem
	wrong := map[string]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		field := strings.Join(e.InstanceLocation, ".")
		if _, unknown := e.ErrorKind.(*kind.FalseSchema); unknown {
			found = append(found, problem{field, ""})
			return
		}
		msg := e.ErrorKind.LocalizedString(printer)
		if ap, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
			msg = "unknown field '" + strings.Join(ap.Properties, "', '") + "'"
		}
		wrong[field] = true
		found = append(found, problem{field, msg})
	}
	walk(ve)
	var msgs []string
	for _, p := range found {
		switch {
		case p.msg == "" && len(wrong) > 0:
			continue
		case p.msg == "":
			msgs = append(msgs, "unknown field '"+p.field+"'")
		case p.field == "":
			msgs = append(msgs, p.msg)
		default:
			msgs = append(msgs, p.field+": "+p.msg)
		}
	}
	if len(msgs) == 0 {
		return err
	}
	return errors.New(strings.Join(msgs, "; "))
}

// printer writes the validator's messages in English.
var printer = message.NewPrinter(language.English)

// DescribeJSON says what is wrong with a JSON document that did not decode
// into a Go value, in the document's terms: the field by its JSON name and
// the JSON type it wants ("context_limit: got string, want integer"), or
// where the syntax broke; not the Go type and field names encoding/json
// gives. Other errors are returned as they are.
func DescribeJSON(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the document"
		}
		return fmt.Errorf("%s: got %s, want %s", field, te.Value, jsonType(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not valid JSON: it ends early")
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", msg)
	}
	return err
}

// jsonType names the JSON type a Go type decodes from.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Pointer:
		return jsonType(t.Elem())
	}
	return "object"
}

// cut shortens a key for an error message.
func cut(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "…"
}
