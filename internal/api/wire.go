package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// What the endpoints take as they are written, checked before anything is
// decoded into the service's types: issue 42 found duplicate keys (the last
// session_id won), unknown fields inside a message dropped without a word,
// content parts of unknown type and data URLs that are not base64 stored,
// and a message with both upload_id and content (the upload ignored).

// truncate cuts s to n bytes for an error message (a 10,000-character id
// was echoed whole).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}

// wireMessage is a message as the endpoints take it: the chat fields, and
// those a read answers (sent back as read, they are ignored).
type wireMessage struct {
	ID         json.RawMessage `json:"id,omitempty"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// Set by the service; ignored.
	Seq          json.RawMessage `json:"seq,omitempty"`
	Tokens       json.RawMessage `json:"tokens,omitempty"`
	IsCompaction json.RawMessage `json:"is_compaction,omitempty"`
	Compaction   json.RawMessage `json:"compaction,omitempty"`
	SummarisedBy json.RawMessage `json:"summarised_by,omitempty"`
	// UploadID names an upload (alone: see checkMessages).
	UploadID json.RawMessage `json:"upload_id,omitempty"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// partTypes are the content part types of OpenAI's Chat Completions
// messages, which the service takes.
var partTypes = map[string]bool{"text": true, "image_url": true, "input_audio": true, "file": true, "refusal": true}

// checkMessages checks a messages array as the endpoints take it: each
// message with the fields of one (an unknown field refused, naming it),
// an upload reference with nothing beside it, content parts of known
// types, and data URLs that are base64.
func checkMessages(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		// A conversation as a file holds it: its "messages" (or
		// "history", "traj") array.
		var file struct {
			Messages, History, Traj json.RawMessage
		}
		if err := json.Unmarshal(raw, &file); err != nil {
			return fmt.Errorf("%w: messages: %v", errBadRequest, schemas.DescribeJSON(err))
		}
		for _, a := range []json.RawMessage{file.Messages, file.History, file.Traj} {
			if a != nil {
				return checkMessages(a)
			}
		}
		return nil // transcript.Parse says what is missing
	}
	if checkedAtOnce(raw) {
		return nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return fmt.Errorf("%w: messages must be an array of messages: %v", errBadRequest, schemas.DescribeJSON(err))
	}
	for i, e := range elems {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(e, &keys); err != nil {
			return fmt.Errorf("%w: message %d is not a JSON object", errBadRequest, i)
		}
		if _, ok := keys["upload_id"]; ok {
			if len(keys) > 1 {
				return fmt.Errorf("%w: message %d names an upload (upload_id) and has other fields: an uploaded message is all in its upload", errBadRequest, i)
			}
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(e))
		dec.DisallowUnknownFields()
		var m wireMessage
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("%w: message %d: %v", errBadRequest, i, schemas.DescribeJSON(err))
		}
		if err := checkContent(m.Content); err != nil {
			return fmt.Errorf("%w: message %d: %v", errBadRequest, i, err)
		}
	}
	return nil
}

// checkedAtOnce reports whether the messages array raw passes
// checkMessages, decoded whole in one pass: the usual append. When it
// does not (an error, or an upload reference), checkMessages goes through
// it a message at a time, to say which one is wrong and how.
func checkedAtOnce(raw json.RawMessage) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var all []wireMessage
	if dec.Decode(&all) != nil || dec.More() {
		return false
	}
	for i := range all {
		if all[i].UploadID != nil || checkContent(all[i].Content) != nil {
			return false
		}
	}
	return true
}

// checkContent checks a message's content parts: each of a known type, an
// image's data URL base64.
func checkContent(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil // a string or null: the message's own decoding checks it
	}
	var parts []struct {
		Type     string `json:"type"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return fmt.Errorf("content must be a string, null or an array of parts: %v", schemas.DescribeJSON(err))
	}
	for j, p := range parts {
		if !partTypes[p.Type] {
			return fmt.Errorf("content part %d has type %q: want text, image_url, input_audio, file or refusal", j, truncate(p.Type, 64))
		}
		if p.Type == "image_url" && p.ImageURL != nil {
			if err := checkDataURL(p.ImageURL.URL); err != nil {
				return fmt.Errorf("content part %d: %v", j, err)
			}
		}
	}
	return nil
}

// checkDataURL checks a data: URL's base64 payload (other URLs are the
// provider's to fetch).
func checkDataURL(u string) error {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return nil
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return errors.New("the image's data URL has no comma before its data")
	}
	if !strings.HasSuffix(meta, ";base64") {
		return errors.New("the image's data URL is not base64 (data:<type>;base64,<data>)")
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		return fmt.Errorf("the image's data URL is not valid base64: %v", err)
	}
	return nil
}
