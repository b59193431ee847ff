package session

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote decodes the JSON string literal b (quotes included) as
// encoding/json does, without its second pass over the value: a message's
// content is most of the bytes an append or a read decodes, and
// Content.UnmarshalJSON had encoding/json check and decode each one again
// (issue 43). It answers ok false for anything it does not take exactly as
// encoding/json would — a control character, a bad escape, a lone
// surrogate, bytes that are not UTF-8 (encoding/json replaces them) — and
// the caller decodes those with encoding/json.
func Unquote(b []byte) (s string, ok bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	b = b[1 : len(b)-1]
	// The usual text: no escape at all.
	i := 0
	for i < len(b) && b[i] != '\\' && b[i] != '"' && b[i] >= 0x20 {
		i++
	}
	if i == len(b) {
		if !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	}
	var sb strings.Builder
	sb.Grow(len(b))
	sb.Write(b[:i])
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"' || c < 0x20:
			return "", false
		case c != '\\':
			j := i + 1
			for j < len(b) && b[j] != '\\' && b[j] != '"' && b[j] >= 0x20 {
				j++
			}
			sb.Write(b[i:j])
			i = j
			continue
		}
		n, ok := unescape(&sb, b[i:])
		if !ok {
			return "", false
		}
		i += n
	}
	out := sb.String()
	if !utf8.ValidString(out) {
		return "", false
	}
	return out, true
}

// unescape writes the escape at the start of b (its backslash first) to
// sb and returns its length; ok is false for one Unquote leaves to
// encoding/json.
func unescape(sb *strings.Builder, b []byte) (n int, ok bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch e := b[1]; e {
	case '"', '\\', '/':
		sb.WriteByte(e)
	case 'b':
		sb.WriteByte('\b')
	case 'f':
		sb.WriteByte('\f')
	case 'n':
		sb.WriteByte('\n')
	case 'r':
		sb.WriteByte('\r')
	case 't':
		sb.WriteByte('\t')
	case 'u':
		r, ok := hex4(b[2:])
		if !ok {
			return 0, false
		}
		if !utf16.IsSurrogate(r) {
			sb.WriteRune(r)
			return 6, true
		}
		// Only a high surrogate followed by a low one is a rune.
		if len(b) < 12 || b[6] != '\\' || b[7] != 'u' {
			return 0, false
		}
		r2, ok := hex4(b[8:])
		if !ok {
			return 0, false
		}
		if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
			return 0, false
		}
		sb.WriteRune(r)
		return 12, true
	default:
		return 0, false
	}
	return 2, true
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
