package session

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends m's JSON to dst, byte for byte what json.Marshal
// writes, and reports whether it did: a message with content parts or a
// compaction's metadata is left to json.Marshal (ok false, dst as it
// was). It is the store's encoder of the usual message, appended on every
// append: json.Marshal went through reflection and compacted Content's
// own JSON a second time (issue 43).
func AppendJSON(dst []byte, m *Message) ([]byte, bool) {
	if m.Content.Parts != nil || m.Compaction != nil {
		return dst, false
	}
	b := append(dst, `{"id":`...)
	b = appendString(b, m.ID)
	if m.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendInt(b, m.Seq, 10)
	}
	b = append(b, `,"role":`...)
	b = appendString(b, string(m.Role))
	b = append(b, `,"content":`...)
	if m.Content.Text == "" && !m.Content.Empty {
		b = append(b, "null"...)
	} else {
		b = appendString(b, m.Content.Text)
	}
	if m.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, m.Name)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			tc := &m.ToolCalls[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"type":`...)
			b = appendString(b, tc.Type)
			b = append(b, `,"function":{"name":`...)
			b = appendString(b, tc.Function.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, tc.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, m.ToolCallID)
	}
	if m.Tokens != 0 {
		b = append(b, `,"tokens":`...)
		b = strconv.AppendInt(b, int64(m.Tokens), 10)
	}
	if m.IsCompaction {
		b = append(b, `,"is_compaction":true`...)
	}
	if m.SummarisedBy != "" {
		b = append(b, `,"summarised_by":`...)
		b = appendString(b, m.SummarisedBy)
	}
	return append(b, '}'), true
}

const hexDigits = "0123456789abcdef"

// appendString writes s as encoding/json does (HTML characters escaped,
// bad UTF-8 as \ufffd, U+2028 and U+2029 escaped).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(dst, s[start:]...), '"')
}
