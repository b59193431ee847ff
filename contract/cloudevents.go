package contract

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// SpecVersion is the CloudEvents version the contract's events are.
const SpecVersion = "1.0"

// HeaderPrefix begins the header of each attribute of an event in binary
// mode (the NATS protocol binding, §3.1).
const HeaderPrefix = "ce-"

// Event is a CloudEvent as the NATS protocol binding carries it: its
// context attributes, extensions as their canonical strings, and its data.
type Event struct {
	ID              string
	Source          string
	Type            string
	Subject         string
	Time            time.Time
	DataContentType string
	DataSchema      string
	// Extensions are the other attributes (traceparent, tracestate, ...),
	// by lower-case name.
	Extensions map[string]string
	Data       []byte
}

// NewEvent is an event of type typ about sessionID with data as JSON.
func NewEvent(id, typ, source, sessionID string, at time.Time, data any) (Event, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return Event{}, err
	}
	ev := Event{ID: id, Type: typ, Source: source, Subject: sessionID, Time: at.UTC(), DataContentType: "application/json", Data: b}
	return ev, ev.Validate()
}

// Validate says what an event lacks: the required attributes (id, source,
// type), extensions named as the specification requires (lower-case
// letters and digits; the 20 characters it advises are not enforced).
func (ev Event) Validate() error {
	var missing []string
	for _, a := range [][2]string{{"id", ev.ID}, {"source", ev.Source}, {"type", ev.Type}} {
		if a[1] == "" {
			missing = append(missing, a[0])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not a valid CloudEvent: %s required", strings.Join(missing, ", "))
	}
	for name := range ev.Extensions {
		if !validAttrName(name) {
			return fmt.Errorf("not a valid CloudEvent: extension name %q is not lower-case letters and digits", name)
		}
	}
	return nil
}

func validAttrName(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// EncodeHeaderValue percent-encodes an attribute's canonical string as
// the binding's §3.1.3.2 says, and nothing more: space, '"', '%' and every
// character outside printable ASCII (U+0021-U+007E), as the %XY of each of
// its UTF-8 bytes, upper case. "urn:x/y" stays "urn:x/y".
func EncodeHeaderValue(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// DecodeHeaderValue reads an attribute from a header value as §3.1.3.2
// says: optional whitespace trimmed, a double-quoted string unescaped (RFC
// 7230 §3.2.6, backslash escapes included), then one round of percent-
// decoding (lower-case hex accepted, unnecessary encoding accepted); a
// result that is not valid UTF-8 (an overlong "%C0%A0") is an error.
func DecodeHeaderValue(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, `"`) {
		u, err := unquote(v)
		if err != nil {
			return "", err
		}
		v = u
	}
	if !strings.Contains(v, "%") {
		if !utf8.ValidString(v) {
			return "", errors.New("not valid UTF-8")
		}
		return v, nil
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			out = append(out, v[i])
			continue
		}
		if i+2 >= len(v) || unhex(v[i+1]) < 0 || unhex(v[i+2]) < 0 {
			return "", fmt.Errorf("bad percent-encoding at byte %d", i)
		}
		out = append(out, byte(unhex(v[i+1])<<4|unhex(v[i+2])))
		i += 2
	}
	if !utf8.Valid(out) {
		return "", errors.New("percent-decodes to invalid UTF-8")
	}
	return string(out), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// unquote reads an RFC 9110 quoted string (a backslash escapes the next
// byte).
func unquote(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '"':
			if i != len(v)-1 {
				return "", errors.New("text after the closing quote")
			}
			return b.String(), nil
		case '\\':
			if i+1 >= len(v) {
				return "", errors.New("unterminated quoted string")
			}
			i++
			b.WriteByte(v[i])
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated quoted string")
}

// Header returns the first value of header name in h, matched in any case
// (NATS headers keep the case they were sent in).
func Header(h map[string][]string, name string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0], true
		}
	}
	return "", false
}

// Mode is how a message carries an event.
type Mode string

// The NATS binding's content modes.
const (
	Binary     Mode = "binary"
	Structured Mode = "structured"
)

// ModeOf says how a message carries an event: structured when its
// Content-Type is application/cloudevents (or, without one, its body is a
// JSON object with specversion), binary when it has a ce- header; ok is
// false when it carries none.
func ModeOf(h map[string][]string, body []byte) (Mode, bool) {
	if ct, _ := Header(h, "Content-Type"); strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/cloudevents") {
		return Structured, true
	}
	for k := range h {
		if _, ok := CutPrefixFold(k, HeaderPrefix); ok {
			return Binary, true
		}
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '{' {
		var probe struct {
			SpecVersion *string `json:"specversion"`
		}
		if json.Unmarshal(b, &probe) == nil && probe.SpecVersion != nil {
			return Structured, true
		}
	}
	return "", false
}

// CutPrefixFold is strings.CutPrefix matching prefix in any case, and only
// when something follows it.
func CutPrefixFold(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

// EncodeBinary writes an event in binary mode (§3.1): every attribute,
// extensions included, a ce- header holding its value encoded by
// EncodeHeaderValue; the data as the payload; Content-Type beside
// ce-datacontenttype for clients that read only it; and Nats-Msg-Id set to
// the id, so that JetStream drops a duplicate publish.
func EncodeBinary(ev Event) (map[string][]string, []byte) {
	h := map[string][]string{
		HeaderPrefix + "specversion": {SpecVersion},
		HeaderPrefix + "id":          {EncodeHeaderValue(ev.ID)},
		HeaderPrefix + "source":      {EncodeHeaderValue(ev.Source)},
		HeaderPrefix + "type":        {EncodeHeaderValue(ev.Type)},
		"Nats-Msg-Id":                {ev.ID},
	}
	if ev.Subject != "" {
		h[HeaderPrefix+"subject"] = []string{EncodeHeaderValue(ev.Subject)}
	}
	if !ev.Time.IsZero() {
		h[HeaderPrefix+"time"] = []string{ev.Time.UTC().Format(time.RFC3339Nano)}
	}
	if ev.DataContentType != "" {
		h[HeaderPrefix+"datacontenttype"] = []string{EncodeHeaderValue(ev.DataContentType)}
		h["Content-Type"] = []string{ev.DataContentType}
	}
	if ev.DataSchema != "" {
		h[HeaderPrefix+"dataschema"] = []string{EncodeHeaderValue(ev.DataSchema)}
	}
	for name, v := range ev.Extensions {
		h[HeaderPrefix+name] = []string{EncodeHeaderValue(v)}
	}
	return h, ev.Data
}

// DecodeEvent reads the event a message carries, in either content mode:
// binary (ce- headers, the payload its data) or structured (a JSON event,
// its data a JSON value or data_base64). It is what a client needs of the
// binding; the service also checks each attribute's type by the
// CloudEvents SDK.
func DecodeEvent(h map[string][]string, body []byte) (Event, error) {
	mode, ok := ModeOf(h, body)
	if !ok {
		return Event{}, errors.New("not a CloudEvent: no ce- headers, no application/cloudevents content type and no JSON event body")
	}
	attrs := map[string]string{}
	var data []byte
	if mode == Structured {
		var err error
		if attrs, data, err = structured(h, body); err != nil {
			return Event{}, err
		}
	} else {
		var err error
		if attrs, err = BinaryAttributes(h); err != nil {
			return Event{}, err
		}
		if _, ok := attrs["datacontenttype"]; !ok {
			if ct, ok := Header(h, "Content-Type"); ok {
				attrs["datacontenttype"] = strings.TrimSpace(ct)
			}
		}
		if len(body) > 0 {
			data = body
		}
	}
	return fromAttrs(attrs, data)
}

// BinaryAttributes reads the attributes of an event in binary mode: every
// ce- header (names in any case, lower-cased), its value decoded by
// DecodeHeaderValue; an attribute given twice with two values is an
// error.
func BinaryAttributes(h map[string][]string) (map[string]string, error) {
	attrs := map[string]string{}
	for k, v := range h {
		name, ok := CutPrefixFold(k, HeaderPrefix)
		if !ok || len(v) == 0 {
			continue
		}
		name = strings.ToLower(name)
		val, err := DecodeHeaderValue(v[0])
		if err != nil {
			return nil, fmt.Errorf("header %s: %v", k, err)
		}
		if prev, dup := attrs[name]; dup && prev != val {
			return nil, fmt.Errorf("attribute %s given twice, as %q and %q", name, prev, val)
		}
		attrs[name] = val
	}
	return attrs, nil
}

// structured reads a structured-mode event's attributes (as strings) and
// data.
func structured(h map[string][]string, body []byte) (map[string]string, []byte, error) {
	if ct, _ := Header(h, "Content-Type"); strings.HasPrefix(strings.ToLower(ct), "application/cloudevents-batch") {
		return nil, nil, errors.New("batch mode is not part of the NATS binding")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, nil, fmt.Errorf("structured event: %v", err)
	}
	attrs := map[string]string{}
	var data []byte
	for k, v := range obj {
		switch k {
		case "data":
			data = v
		case "data_base64":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, nil, fmt.Errorf("structured event: data_base64: %v", err)
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, nil, fmt.Errorf("structured event: data_base64: %v", err)
			}
			data = b
		default:
			var s string
			if json.Unmarshal(v, &s) != nil {
				s = string(bytes.TrimSpace(v)) // a number or a boolean extension: its JSON
			}
			attrs[k] = s
		}
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		data = nil
	}
	// Data of a type other than JSON is the text of a JSON string.
	if ct := attrs["datacontenttype"]; ct != "" && !isJSON(ct) && len(data) > 0 && data[0] == '"' {
		var text string
		if err := json.Unmarshal(data, &text); err != nil {
			return nil, nil, fmt.Errorf("structured event: data: %v", err)
		}
		data = []byte(text)
	}
	return attrs, data, nil
}

// isJSON reports whether a media type is JSON (application/json, text/json
// or a +json suffix).
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(strings.ToLower(ct), ";")
	mt = strings.TrimSpace(mt)
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// fromAttrs builds the event from its attributes, checking specversion,
// time and the required attributes.
func fromAttrs(attrs map[string]string, data []byte) (Event, error) {
	spec, ok := attrs["specversion"]
	if !ok {
		return Event{}, errors.New("no specversion attribute")
	}
	if spec != SpecVersion {
		return Event{}, fmt.Errorf("specversion %q is not %s", spec, SpecVersion)
	}
	ev := Event{Data: data}
	for name, val := range attrs {
		switch name {
		case "specversion":
		case "id":
			ev.ID = val
		case "source":
			ev.Source = val
		case "type":
			ev.Type = val
		case "subject":
			ev.Subject = val
		case "dataschema":
			ev.DataSchema = val
		case "datacontenttype":
			ev.DataContentType = val
		case "time":
			t, err := time.Parse(time.RFC3339Nano, val)
			if err != nil {
				return ev, fmt.Errorf("time %q is not an RFC 3339 timestamp", val)
			}
			ev.Time = t
		default:
			if ev.Extensions == nil {
				ev.Extensions = map[string]string{}
			}
			ev.Extensions[name] = val
		}
	}
	return ev, ev.Validate()
}
