package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is one listener and the handler behind it.
type Server struct {
	// Name labels the listener in logs ("api", "metrics").
	Name string
	// Listener is already bound, so callers (and tests using port 0) know
	// the address before serving starts.
	Listener net.Listener
	// Handler serves every request.
	Handler http.Handler
	// Limits bound slow clients; the zero value means DefaultLimits.
	Limits Limits
}

// Listen binds addr for a Server, naming the flag in the error.
func Listen(flagName, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: %w", flagName, addr, err)
	}
	return ln, nil
}

// Run serves every server until ctx is done or one of them fails, then shuts
// them all down, waiting at most drain for in-flight requests (including SSE
// streams) before closing their connections. onShutdown, if not nil, runs
// when draining starts so handlers that stream can end cleanly. Run returns
// the first serve error, or nil after a clean drain.
func Run(ctx context.Context, log *slog.Logger, drain time.Duration, onShutdown func(), servers ...Server) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type running struct {
		name string
		hs   *http.Server
	}
	httpServers := make([]running, 0, len(servers))
	errc := make(chan error, len(servers))
	var wg sync.WaitGroup
	for _, s := range servers {
		lim := s.Limits
		if lim == (Limits{}) {
			lim = DefaultLimits()
		}
		hs := &http.Server{
			Handler:           bound(s.Handler, lim),
			ReadHeaderTimeout: lim.ReadHeader,
			IdleTimeout:       lim.Idle,
			// No ReadTimeout or WriteTimeout: they bound a whole request or
			// response and would cut long uploads and SSE streams; bound
			// bounds the lack of progress instead.
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		if onShutdown != nil {
			hs.RegisterOnShutdown(onShutdown)
		}
		httpServers = append(httpServers, running{name: s.Name, hs: hs})
		log.Info("listening", "listener", s.Name, "addr", s.Listener.Addr().String())
		wg.Add(1)
		go func(s Server) {
			defer wg.Done()
			if err := hs.Serve(s.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", s.Name, err)
				cancel()
			}
		}(s)
	}
	<-ctx.Done()
	log.Info("shutting down", "drain", drain.String())
	sctx, scancel := context.WithTimeout(context.Background(), drain)
	defer scancel()
	var sdErr error
	for _, r := range httpServers {
		if err := r.hs.Shutdown(sctx); err != nil {
			log.Warn("drain bound reached, closing remaining connections", "listener", r.name, "err", err)
			_ = r.hs.Close()
			sdErr = err
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	if sdErr != nil && !errors.Is(sdErr, context.DeadlineExceeded) {
		return sdErr
	}
	return nil
}
