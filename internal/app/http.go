package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/inspect"
	"github.com/compactor/compactor/internal/kvstore"
)

// httpServer is one of the service's HTTP listeners: serving from the
// service's first step, shut down with it.
type httpServer struct {
	hs   *http.Server
	flag string
	// ended receives Serve's error (nil for a shutdown) when it returns.
	ended chan error
}

// listenHTTP listens on addr (named by flag in errors) and serves h at
// once; it returns the server and the address it listens on.
func listenHTTP(flag, addr string, h http.Handler) (*httpServer, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	s := &httpServer{hs: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, flag: flag, ended: make(chan error, 1)}
	go func() {
		err := s.hs.Serve(l)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		} else {
			err = fmt.Errorf("%s server: %w", flag, err)
		}
		s.ended <- err
	}()
	return s, l.Addr().String(), nil
}

func (s *httpServer) shutdown() {
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = s.hs.Shutdown(sctx)
}

// pprofHandler serves net/http/pprof under /debug/pprof/ (its own mux:
// the profiles are never on the metrics address).
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// inspector is the inspector page over the service's stores: behind an
// operator's NATS credentials when the server requires authentication.
func (a *App) inspector(breakers *kvstore.Breakers) http.Handler {
	ic := inspect.Config{Sessions: a.Sessions, Breakers: breakers, Logger: a.log, Tenants: func() []string {
		return slices.Collect(maps.Keys(a.Quotas.Usage().Tenants))
	}, Events: func(ctx context.Context, filter string, since time.Time, max int) ([]events.Stored, error) {
		return events.Read(ctx, a.NC, consumer.ResultStream, filter, since, max)
	}}
	if a.NC.AuthRequired() {
		ic.Auth = &inspect.NATSAuth{URLs: a.URL, Options: a.cfg.SignInOptions, ListSubject: contract.SubjectList,
			InfoSubject: "$JS.API.STREAM.INFO.KV_" + kvstore.BreakersBucket}
	} else {
		a.log.Warn("the inspector page asks for no credentials: the NATS server requires none (anyone who reaches the metrics address reads every session)")
	}
	return inspect.Handler(ic)
}

// handler serves /metrics, /livez (200 from the process's first step),
// /healthz (200 while connected to NATS), /readyz (200 while it takes
// requests: set up, connected, consuming, and the store taking writes;
// else 503 saying why: what a starting service waits for, a full store) and, with --ui, the inspector page under /ui/ (503
// until the stores are bound).
func (a *App) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.Metrics.Handler())
	if a.cfg.UI {
		mux.Handle(inspect.Prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := a.ui.Load(); h != nil {
				(*h).ServeHTTP(w, r)
				return
			}
			http.Error(w, "starting: "+*a.starting.Load(), http.StatusServiceUnavailable)
		}))
	}
	// Liveness: the process runs and serves HTTP, whatever NATS does (a
	// probe on /healthz or /readyz would restart every replica in a NATS
	// outage, which a restart cannot fix).
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.connected(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// connected says why the service is not connected to NATS (nil when it
// is).
func (a *App) connected() error {
	nc := a.nc.Load()
	switch {
	case nc == nil:
		return fmt.Errorf("starting: %s", *a.starting.Load())
	case !nc.IsConnected():
		return fmt.Errorf("not connected to NATS: %s", nc.Status())
	}
	return nil
}

// ready says why the service does not take requests (nil when it does).
func (a *App) ready() error {
	if err := a.connected(); err != nil {
		return err
	}
	if s := *a.starting.Load(); s != "" {
		return fmt.Errorf("starting: %s", s)
	}
	if since, full := a.store.Full(); full {
		return fmt.Errorf("the session store refuses writes for want of room since %s: delete sessions, or raise the server's max_file_store", since.UTC().Format(time.RFC3339))
	}
	if !a.Consumer.Consuming() {
		return errors.New("not consuming " + consumer.RequestStream + " (starting, stopping, or the consumer cannot be pulled: see the log)")
	}
	return nil
}
