package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// CheckKeys refuses a JSON value with an object that names a key twice:
// encoding/json keeps the last, and a body that says two things says
// neither. A syntax error is not its to report (the decode says it): it
// answers nil.
//
// It scans the bytes once without decoding them: every session write and
// event goes through it, and a walk of encoding/json's tokens (a string
// allocated per value) cost a quarter of an append's CPU at the endpoint.
func CheckKeys(data []byte) error {
	s := keyScan{b: data}
	err, _ := s.value(0)
	return err
}

// maxKeyDepth bounds the nesting CheckKeys follows (encoding/json refuses
// deeper values itself, at 10,000).
const maxKeyDepth = 10000

// keyScan is CheckKeys's scanner: b from i, path the keys and indexes
// down to the value being scanned (named only in an error).
type keyScan struct {
	b    []byte
	i    int
	path []pathSeg
}

// pathSeg is a step of a value's path: a key, or an index.
type pathSeg struct {
	key   []byte
	index int
	isKey bool
}

// at is the path of the value being scanned.
func (s *keyScan) at() string {
	var b strings.Builder
	b.WriteString("$")
	for _, p := range s.path {
		if p.isKey {
			b.WriteString("." + cut(string(p.key)))
		} else {
			b.WriteString("[" + strconv.Itoa(p.index) + "]")
		}
	}
	return b.String()
}

func (s *keyScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str scans a string from its opening quote and returns its raw bytes
// (between the quotes) and whether it holds an escape.
func (s *keyScan) str() (raw []byte, escaped, ok bool) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.i = j + 1
			return s.b[start:j], escaped, true
		}
	}
	return nil, false, false
}

// value scans one value; ok false is a syntax error (scanning stops: the
// decode reports it).
func (s *keyScan) value(depth int) (err error, ok bool) {
	s.ws()
	if s.i >= len(s.b) || depth > maxKeyDepth {
		return nil, false
	}
	switch s.b[s.i] {
	case '{':
		return s.object(depth)
	case '[':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil, true
		}
		for n := 0; ; n++ {
			s.path = append(s.path, pathSeg{index: n})
			if err, ok := s.value(depth + 1); err != nil || !ok {
				return err, ok
			}
			s.path = s.path[:len(s.path)-1]
			if more, ok := s.after(']'); !more {
				return nil, ok
			}
		}
	case '"':
		_, _, ok := s.str()
		return nil, ok
	default: // a number, true, false or null
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return nil, s.i > start
			}
			s.i++
		}
		return nil, s.i > start
	}
}

// object scans an object from its opening brace.
func (s *keyScan) object(depth int) (error, bool) {
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil, true
	}
	var few [8][]byte // the keys so far; a set once there are more
	var seen map[string]bool
	n := 0
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return nil, false
		}
		raw, escaped, ok := s.str()
		if !ok {
			return nil, false
		}
		if escaped {
			var k string
			if json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &k) != nil {
				return nil, false
			}
			raw = []byte(k)
		}
		switch {
		case seen != nil:
			if seen[string(raw)] {
				return fmt.Errorf("%s: the key %q is given twice", s.at(), cut(string(raw))), true
			}
			seen[string(raw)] = true
		default:
			for _, k := range few[:n] {
				if bytes.Equal(k, raw) {
					return fmt.Errorf("%s: the key %q is given twice", s.at(), cut(string(raw))), true
				}
			}
			if n < len(few) {
				few[n] = raw
				n++
				break
			}
			seen = make(map[string]bool, 2*len(few))
			for _, k := range few {
				seen[string(k)] = true
			}
			seen[string(raw)] = true
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return nil, false
		}
		s.i++
		s.path = append(s.path, pathSeg{key: raw, isKey: true})
		if err, ok := s.value(depth + 1); err != nil || !ok {
			return err, ok
		}
		s.path = s.path[:len(s.path)-1]
		if more, ok := s.after('}'); !more {
			return nil, ok
		}
	}
}

// after scans what follows a value in an array or an object: a comma
// (more is to come) or the closing byte; ok false is a syntax error.
func (s *keyScan) after(closing byte) (more, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}
