package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/transcript"
)

// The session endpoints: create, append, upload, context, history,
// message, delete, list.

type sessionRef struct {
	SessionID string `json:"session_id"`
}

// ListBody is the body of session.list.
type ListBody struct {
	PageBody
	Prefix string `json:"prefix,omitempty"`
	Model  string `json:"model,omitempty"`
	// IdleFor is a Go duration ("90m", "24h").
	IdleFor   string `json:"idle_for,omitempty"`
	Compacted *bool  `json:"compacted,omitempty"`
}

func (s *Server) sessionList(r micro.Request) {
	var b ListBody
	if len(r.Data()) > 0 {
		if err := decode(r, &b); err != nil {
			s.fail(r, err)
			return
		}
	}
	opt := session.ListOptions{After: b.After, Limit: b.Limit, Prefix: b.Prefix, Model: b.Model, Compacted: b.Compacted}
	if b.IdleFor != "" {
		d, err := time.ParseDuration(b.IdleFor)
		if err != nil {
			s.fail(r, fmt.Errorf("%w: idle_for %q is not a duration (e.g. \"24h\")", errBadRequest, b.IdleFor))
			return
		}
		opt.IdleFor = d
	}
	s.answer(r, func(ctx context.Context) (any, error) { return s.d.Sessions.List(ctx, opt) })
}

// CreateBody is the body of session.create.
type CreateBody struct {
	SessionID    string          `json:"session_id,omitempty"`
	Model        string          `json:"model,omitempty"`
	ContextLimit int             `json:"context_limit,omitempty"`
	Messages     json.RawMessage `json:"messages"`
}

func parseMessages(raw json.RawMessage, allowEmpty bool) ([]session.Message, error) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "[]" {
		if allowEmpty {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: messages is required", errBadRequest)
	}
	msgs, ok := parseAtOnce(raw)
	if !ok {
		if err := checkMessages(raw); err != nil {
			return nil, err
		}
		var err error
		if msgs, err = transcript.Parse(raw); err != nil {
			return nil, err
		}
	}
	if len(msgs) > contract.MaxMessagesPerCall {
		return nil, fmt.Errorf("%w: %d messages in one request, at most %d: send the rest with session.append", errBadRequest, len(msgs), contract.MaxMessagesPerCall)
	}
	return msgs, nil
}

func (s *Server) sessionCreate(r micro.Request) {
	s.write(r, func(ctx context.Context) (any, error) {
		var b CreateBody
		if err := decode(r, &b); err != nil {
			return nil, err
		}
		if b.SessionID != "" {
			if err := checkSessionID(b.SessionID); err != nil {
				return nil, err
			}
		}
		if isUploadRef(b.Messages) {
			return nil, fmt.Errorf("%w: a create cannot take uploads (they belong to a session): create the session, then append them", errBadRequest)
		}
		msgs, err := parseMessages(b.Messages, true)
		if err != nil {
			return nil, err
		}
		return s.d.Sessions.Create(ctx, session.Record{SessionID: b.SessionID, Model: b.Model, ContextLimit: b.ContextLimit}, msgs)
	})
}

// write answers a session write (create, append, upload part) with f,
// once the tenant's write quotas admit it (answered at once, before
// anything is read or stored); f decodes the body itself, in the worker,
// so that a tenant's large bodies do not hold up the endpoint's dispatch.
func (s *Server) write(r micro.Request, f func(context.Context) (any, error)) {
	release := func() {}
	if s.d.Quotas != nil {
		var err error
		if release, err = s.d.Quotas.Writes(tenantOf(r)); err != nil {
			s.fail(r, err)
			return
		}
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		defer release()
		return f(ctx)
	})
}

// isUploadRef reports whether a messages array holds a {"upload_id"}
// element.
func isUploadRef(raw json.RawMessage) bool {
	var elems []map[string]json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return false
	}
	for _, e := range elems {
		if len(e) == 1 && e["upload_id"] != nil {
			return true
		}
	}
	return false
}

// AppendBody is the body of session.append.
type AppendBody struct {
	SessionID string          `json:"session_id"`
	Messages  json.RawMessage `json:"messages"`
	// ExpectedHeadSeq, when set, applies the append only at that head
	// (else 409, with the head in the answer).
	ExpectedHeadSeq *int64 `json:"expected_head_seq,omitempty"`
}

func (s *Server) sessionAppend(r micro.Request) {
	s.write(r, func(ctx context.Context) (any, error) {
		b, msgs, ok := decodeAppendAtOnce(r.Data())
		var ids []string
		if !ok {
			if err := decodeSessionBody(r, &b, &b.SessionID); err != nil {
				return nil, err
			}
			// Messages uploaded in parts ({"upload_id"}) take their
			// places, and are removed once appended.
			raw, uids, err := s.d.Sessions.ResolveUploads(ctx, b.SessionID, b.Messages)
			if err != nil {
				return nil, err
			}
			if msgs, err = parseMessages(raw, false); err != nil {
				return nil, err
			}
			ids = uids
		}
		out, err := s.d.Sessions.Append(ctx, b.SessionID, msgs, session.AppendOptions{ExpectedHeadSeq: b.ExpectedHeadSeq})
		if err == nil {
			s.d.Sessions.DropUploads(ctx, b.SessionID, ids)
		}
		return out, err
	})
}

func (s *Server) sessionUpload(r micro.Request) {
	s.write(r, func(ctx context.Context) (any, error) {
		var b contract.UploadBody
		if err := decodeSessionBody(r, &b, &b.SessionID); err != nil {
			return nil, err
		}
		return s.d.Sessions.Upload(ctx, b.SessionID, b.UploadID, b.Part, b.Parts, b.Data)
	})
}

func (s *Server) sessionContext(r micro.Request) {
	s.paged(r, func(ctx context.Context, sid string) (any, error) { return s.d.Sessions.Context(ctx, sid) })
}

func (s *Server) sessionHistory(r micro.Request) {
	s.paged(r, func(ctx context.Context, sid string) (any, error) { return s.d.Sessions.History(ctx, sid) })
}

// paged answers f's value for a contract.PagedBody: whole when it fits one
// message, else a 413 with the number of parts, or the part asked for.
func (s *Server) paged(r micro.Request, f func(context.Context, string) (any, error)) {
	var b contract.PagedBody
	if !s.decodeSession(r, &b, &b.SessionID) {
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		v, err := f(ctx, b.SessionID)
		if err != nil {
			return nil, err
		}
		whole, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		size := s.partSize()
		if b.Part != nil {
			return sessions.Cut(whole, *b.Part, size, b.Digest)
		}
		if room := s.room(); len(whole) > room {
			return nil, &tooLarge{bytes: len(whole), room: room, parts: sessions.PartsOf(whole, size)}
		}
		return json.RawMessage(whole), nil
	})
}

// room is the most bytes an answer may have: max_payload less its
// headers and framing.
func (s *Server) room() int { return int(s.nc.MaxPayload()) - 8<<10 }

// partSize is how many bytes of an answer one part carries: base64 in a
// JSON body within room.
func (s *Server) partSize() int { return (s.room() - 1<<10) * 3 / 4 }

func (s *Server) sessionDelete(r micro.Request) {
	s.withSession(r, func(ctx context.Context, sid string) (any, error) {
		out, err := s.d.Sessions.Delete(ctx, sid)
		if err == nil {
			s.log.Info("session deleted by request", callerAttrs(r, slog.String("session_id", sid))...)
		}
		return out, err
	})
}

func (s *Server) sessionMessage(r micro.Request) {
	var b struct {
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
		Part      *int   `json:"part"`
	}
	if !s.decodeSession(r, &b, &b.SessionID) {
		return
	}
	if b.Seq < 1 {
		s.fail(r, fmt.Errorf("%w: seq must be >= 1", errBadRequest))
		return
	}
	if b.Part != nil {
		s.answer(r, func(ctx context.Context) (any, error) {
			return s.d.Sessions.MessagePart(ctx, b.SessionID, b.Seq, *b.Part)
		})
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) { return s.d.Sessions.Message(ctx, b.SessionID, b.Seq) })
}

// sessionSearch answers compactor.session.search: a session's stored
// messages that match, whatever compaction did with them.
func (s *Server) sessionSearch(r micro.Request) {
	var b contract.SearchBody
	if !s.decodeSession(r, &b, &b.SessionID) {
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) { return s.d.Sessions.Search(ctx, b) })
}

// sessionExpand answers compactor.session.expand: a page of the originals
// behind a compaction, a tool call, or a seq range.
func (s *Server) sessionExpand(r micro.Request) {
	var b contract.ExpandBody
	if !s.decodeSession(r, &b, &b.SessionID) {
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) { return s.d.Sessions.Expand(ctx, b) })
}
