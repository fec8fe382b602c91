package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// shutdown stops the servers gracefully: see Serve.
func (s *Server) shutdown(ctx context.Context, hs *http.Server, gs *grpc.Server) {
	s.setReady(false)
	s.health.Shutdown() // NOT_SERVING, for good
	close(s.draining)
	s.log.InfoContext(ctx, "shutting down: not ready", "drain", s.cfg.DrainDelay, "timeout", s.cfg.ShutdownTimeout)
	if s.cfg.DrainDelay > 0 {
		t := time.NewTimer(s.cfg.DrainDelay)
		<-t.C
	}
	// ctx has ended: the shutdown gets a bounded context of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := hs.Shutdown(sctx); err != nil {
			s.log.WarnContext(ctx, "http: requests still in flight at the shutdown timeout were cut", "err", err)
			hs.Close()
		}
	})
	wg.Go(func() {
		// RLQS streams last as long as their clients: they are told to
		// expire their assignments and ended, so that the stop can
		// wait for the calls in flight.
		s.adapters.StopRLQS()
		done := make(chan struct{})
		go func() {
			gs.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-sctx.Done():
			s.log.WarnContext(ctx, "grpc: calls still in flight at the shutdown timeout were cut")
			gs.Stop()
			<-done
		}
	})
	wg.Wait()
}
