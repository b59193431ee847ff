package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
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
	wireExtra
}

// wireExtra are the fields of a message as the endpoints take it besides
// the chat fields.
type wireExtra struct {
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

// atOnceMessage is wireMessage with the chat fields in the service's own
// types: parseAtOnce decodes the usual append into it in one pass.
type atOnceMessage struct {
	ID         transcript.ID      `json:"id"`
	Role       session.Role       `json:"role"`
	Content    session.Content    `json:"content"`
	Name       string             `json:"name"`
	ToolCalls  []session.ToolCall `json:"tool_calls"`
	ToolCallID string             `json:"tool_call_id"`
	wireExtra
}

// parseAtOnce decodes a messages array in one pass, as checkMessages and
// transcript.Parse together would take it, and reports whether it did:
// the usual append (issue 43: the array was decoded twice, checked, then
// parsed). Anything else — an error, an upload reference, content parts,
// a message Validate refuses — answers false, and checkMessages and
// transcript.Parse say what is wrong as before.
func parseAtOnce(raw json.RawMessage) ([]session.Message, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var all []atOnceMessage
	if strict(raw, &all) != nil {
		return nil, false
	}
	return messagesOf(all)
}

// messagesOf converts what parseAtOnce decoded, and reports whether every
// message is one it takes.
func messagesOf(all []atOnceMessage) ([]session.Message, bool) {
	if len(all) == 0 {
		return nil, false
	}
	out := make([]session.Message, len(all))
	for i := range all {
		w := &all[i]
		if w.UploadID != nil || len(w.Content.Parts) > 0 {
			return nil, false
		}
		out[i] = session.Message{ID: string(w.ID), Role: w.Role, Content: w.Content, Name: w.Name, ToolCalls: w.ToolCalls, ToolCallID: w.ToolCallID}
		transcript.DefaultTypes(&out[i])
		if out[i].Validate() != nil {
			return nil, false
		}
	}
	return out, true
}

// strict decodes one JSON value into v as the fast paths take it: names
// matched exactly, none unknown or twice, valid UTF-8 only, nothing after
// the value; anything else is an error, and the caller goes the long way,
// which answers what encoding/json and schemas.CheckKeys answer. It is
// encoding/json/v2's reference implementation (go-json-experiment), whose
// defaults are these checks: an append's body decodes 3x faster than with
// encoding/json's Decoder and the key scan before it (BenchmarkDecodeAppend).
func strict(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true))
}

// appendAtOnce is AppendBody with its messages decoded in the same pass.
type appendAtOnce struct {
	SessionID       string          `json:"session_id"`
	Messages        []atOnceMessage `json:"messages"`
	ExpectedHeadSeq *int64          `json:"expected_head_seq"`
}

// decodeAppendAtOnce decodes a session.append body and its messages in
// one pass, and reports whether it did: the usual append, with no upload.
// Anything else answers false, and the endpoint goes the long way (decode,
// uploads, checkMessages, transcript.Parse), which says what is wrong.
func decodeAppendAtOnce(data []byte) (AppendBody, []session.Message, bool) {
	if bytes.Contains(data, []byte(`"upload_id"`)) {
		return AppendBody{}, nil, false
	}
	var b appendAtOnce
	if strict(data, &b) != nil || checkSessionID(b.SessionID) != nil {
		return AppendBody{}, nil, false
	}
	msgs, ok := messagesOf(b.Messages)
	if !ok || len(msgs) > contract.MaxMessagesPerCall {
		return AppendBody{}, nil, false
	}
	return AppendBody{SessionID: b.SessionID, ExpectedHeadSeq: b.ExpectedHeadSeq}, msgs, true
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
