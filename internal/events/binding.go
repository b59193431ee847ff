package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// The NATS protocol binding of CloudEvents (nats-protocol-binding.md,
// version 1.0.3): binary mode puts every attribute, extensions included,
// in a header named ce-<attribute>; structured mode is the JSON event
// format as the payload.

// headerPrefix starts the header of every attribute in binary mode.
const headerPrefix = "ce-"

// EncodeHeaderValue percent-encodes an attribute's canonical string as
// §3.1.3.2 says, and nothing more: space, '"', '%' and every character
// outside printable ASCII (U+0021-U+007E), as the %XY of each of its UTF-8
// bytes, upper case. "urn:x/y" stays "urn:x/y".
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
			return "", fmt.Errorf("not valid UTF-8")
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
		return "", fmt.Errorf("percent-decodes to invalid UTF-8")
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

// unquote reads an RFC 7230 quoted-string that is the whole value.
func unquote(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("text after the closing quote")
			}
			return b.String(), nil
		case '\\':
			if i+1 >= len(v) {
				return "", fmt.Errorf("unterminated quoted string")
			}
			i++
			b.WriteByte(v[i])
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated quoted string")
}

// header returns a header's first value, matching the name case-
// insensitively as NATS header names are (the SDK's binding does not).
func header(h map[string][]string, name string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0], true
		}
	}
	return "", false
}

// Mode is how a message carries its event.
type Mode string

// Content modes.
const (
	Binary     Mode = "binary"
	Structured Mode = "structured"
)

// ModeOf tells the content mode of a message: structured when its
// Content-Type is application/cloudevents... (§3, matched case-
// insensitively); binary when it has ce- headers; structured also when it
// has none and its body is a JSON object with a specversion, as the
// CloudEvents SDKs' own NATS bindings send structured events (with no
// Content-Type at all). ok is false when it is neither.
func ModeOf(h map[string][]string, body []byte) (Mode, bool) {
	if ct, _ := header(h, "Content-Type"); strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/cloudevents") {
		return Structured, true
	}
	for k := range h {
		if _, ok := cutPrefixFold(k, headerPrefix); ok {
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

// DecodeEvent reads the CloudEvent a NATS message carries, in either
// content mode, and validates its attributes. In binary mode every ce-
// header is an attribute (names case-insensitive, values decoded by
// DecodeHeaderValue); ce-datacontenttype gives the data's type, and
// Content-Type does where it is absent. An attribute given twice with
// different values is an error.
func DecodeEvent(h map[string][]string, body []byte) (cloudevents.Event, error) {
	mode, ok := ModeOf(h, body)
	if !ok {
		return cloudevents.Event{}, fmt.Errorf("not a CloudEvent: no ce- headers, no application/cloudevents content type and no JSON event body")
	}
	if mode == Structured {
		if ct, _ := header(h, "Content-Type"); strings.HasPrefix(strings.ToLower(ct), "application/cloudevents-batch") {
			return cloudevents.Event{}, fmt.Errorf("batch mode is not part of the NATS binding")
		}
		var ev cloudevents.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			return ev, fmt.Errorf("structured event: %v", err)
		}
		if v := ev.SpecVersion(); v != cloudevents.CloudEventsVersionV1 {
			return ev, fmt.Errorf("specversion %q is not %s", v, cloudevents.CloudEventsVersionV1)
		}
		return ev, validate(ev)
	}
	attrs := map[string]string{}
	for k, v := range h {
		name, ok := cutPrefixFold(k, headerPrefix)
		if !ok || len(v) == 0 {
			continue
		}
		name = strings.ToLower(name)
		val, err := DecodeHeaderValue(v[0])
		if err != nil {
			return cloudevents.Event{}, fmt.Errorf("header %s: %v", k, err)
		}
		if prev, dup := attrs[name]; dup && prev != val {
			return cloudevents.Event{}, fmt.Errorf("attribute %s given twice, as %q and %q", name, prev, val)
		}
		attrs[name] = val
	}
	spec, ok := attrs["specversion"]
	if !ok {
		return cloudevents.Event{}, fmt.Errorf("binary mode without a ce-specversion header")
	}
	if spec != cloudevents.CloudEventsVersionV1 {
		return cloudevents.Event{}, fmt.Errorf("specversion %q is not %s", spec, cloudevents.CloudEventsVersionV1)
	}
	ev := cloudevents.New(spec)
	for name, val := range attrs {
		if err := setAttr(&ev, name, val); err != nil {
			return ev, fmt.Errorf("header %s%s: %v", headerPrefix, name, err)
		}
	}
	if _, ok := attrs["datacontenttype"]; !ok {
		if ct, ok := header(h, "Content-Type"); ok {
			ev.SetDataContentType(strings.TrimSpace(ct))
		}
	}
	if len(body) > 0 {
		ev.DataEncoded = body
	}
	return ev, validate(ev)
}

func validate(ev cloudevents.Event) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("not a valid CloudEvent: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	return nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

func setAttr(ev *cloudevents.Event, name, val string) error {
	switch name {
	case "specversion":
	case "id":
		ev.SetID(val)
	case "source":
		ev.SetSource(val)
	case "type":
		ev.SetType(val)
	case "subject":
		ev.SetSubject(val)
	case "dataschema":
		ev.SetDataSchema(val)
	case "datacontenttype":
		ev.SetDataContentType(val)
	case "time":
		t, err := types.ParseTime(val)
		if err != nil {
			return err
		}
		ev.SetTime(t)
	default:
		if err := ev.Context.SetExtension(name, val); err != nil {
			return err
		}
	}
	return nil
}

// EncodeBinary writes an event in binary mode (§3.1): every attribute,
// extensions included, a ce- header holding its canonical string encoded by
// EncodeHeaderValue; the data as the payload; Content-Type beside
// ce-datacontenttype for clients that read only it; and Nats-Msg-Id set to
// the id, so that JetStream drops a duplicate publish.
func EncodeBinary(ev cloudevents.Event) (map[string][]string, []byte) {
	h := map[string][]string{
		"ce-specversion": {ev.SpecVersion()},
		"ce-id":          {EncodeHeaderValue(ev.ID())},
		"ce-source":      {EncodeHeaderValue(ev.Source())},
		"ce-type":        {EncodeHeaderValue(ev.Type())},
		"Nats-Msg-Id":    {ev.ID()},
	}
	if s := ev.Subject(); s != "" {
		h["ce-subject"] = []string{EncodeHeaderValue(s)}
	}
	if !ev.Time().IsZero() {
		h["ce-time"] = []string{ev.Time().UTC().Format(time.RFC3339Nano)}
	}
	if ct := ev.DataContentType(); ct != "" {
		h["ce-datacontenttype"] = []string{EncodeHeaderValue(ct)}
		h["Content-Type"] = []string{ct}
	}
	if s := ev.DataSchema(); s != "" {
		h["ce-dataschema"] = []string{EncodeHeaderValue(s)}
	}
	for name, v := range ev.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			continue // Validate refuses such an event before it is sent
		}
		h[headerPrefix+name] = []string{EncodeHeaderValue(s)}
	}
	return h, ev.Data()
}
