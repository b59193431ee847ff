package api

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/session"
)

// The breaker endpoints: get, reset (one or every breaker), list.

func (s *Server) breakerGet(r micro.Request) {
	s.withSession(r, func(ctx context.Context, sid string) (any, error) { return s.d.Breakers.Breaker(ctx, sid) })
}

// ResetAnswer is what a breaker reset answers.
type ResetAnswer struct {
	SessionID string `json:"session_id"`
	// WasOpen says the breaker was open (CompactionCircuitClosed was
	// published).
	WasOpen  bool            `json:"was_open"`
	Previous session.Breaker `json:"previous"`
}

// ResetAllAnswer is what resetting every breaker answers.
type ResetAllAnswer struct {
	// Reset lists each breaker reset, with whether it was open.
	Reset []ResetAnswer `json:"reset"`
}

func (s *Server) breakerReset(r micro.Request) {
	var body struct {
		SessionID string `json:"session_id"`
		All       bool   `json:"all"`
	}
	if err := decode(r, &body); err != nil {
		s.fail(r, err)
		return
	}
	if body.All {
		if body.SessionID != "" {
			s.fail(r, fmt.Errorf("%w: give session_id or all, not both", errBadRequest))
			return
		}
		s.answer(r, func(ctx context.Context) (any, error) {
			return ResetAll(ctx, s.d.Sessions, s.d.Publisher, s.d.Breakers, s.log.With(callerAttrs(r)...))
		})
		return
	}
	if err := checkSessionID(body.SessionID); err != nil {
		s.fail(r, err)
		return
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		prev, err := events.ResetBreaker(ctx, s.d.Sessions, s.d.Publisher, body.SessionID)
		if err != nil {
			return nil, err
		}
		s.log.Info("breaker reset by request", callerAttrs(r, slog.String("session_id", body.SessionID), slog.Bool("was_open", prev.Open()))...)
		return ResetAnswer{SessionID: body.SessionID, WasOpen: prev.Open(), Previous: prev}, nil
	})
}

// ResetAll resets every stored breaker (an operator's move after an
// outage), publishing CompactionCircuitClosed for each that was open.
func ResetAll(ctx context.Context, svc events.BreakerResetter, pub *events.Publisher, breakers BreakerLister, log *slog.Logger) (ResetAllAnswer, error) {
	list, err := breakers.List(ctx)
	if err != nil {
		return ResetAllAnswer{}, err
	}
	prev, err := events.ResetAll(ctx, svc, pub, list)
	out := ResetAllAnswer{Reset: make([]ResetAnswer, 0, len(prev))}
	for _, b := range prev {
		out.Reset = append(out.Reset, ResetAnswer{SessionID: b.SessionID, WasOpen: b.Open(), Previous: b})
	}
	if log != nil {
		log.Info("every breaker reset by request", slog.Int("breakers", len(out.Reset)))
	}
	return out, err
}

// PageBody asks for one page of a list.
type PageBody struct {
	Limit int    `json:"limit,omitempty"`
	After string `json:"after,omitempty"`
}

func (s *Server) breakerList(r micro.Request) {
	var b PageBody
	if len(r.Data()) > 0 {
		if err := decode(r, &b); err != nil {
			s.fail(r, err)
			return
		}
	}
	s.answer(r, func(ctx context.Context) (any, error) {
		if b != (PageBody{}) {
			return s.d.Breakers.Page(ctx, b.After, b.Limit)
		}
		list, err := s.d.Breakers.List(ctx)
		if list == nil {
			list = []session.Breaker{}
		}
		return list, err
	})
}
