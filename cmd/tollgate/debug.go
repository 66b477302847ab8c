package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// serveDebug serves Go's profiler (net/http/pprof: CPU, heap and
// allocation profiles, goroutines) on addr, a loopback address
// (TOLLGATE_DEBUG_ADDR), for an operator measuring where a check's time
// goes: `go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=10`.
// With it on, one contended mutex wait in 100 is sampled too (…/mutex: who
// waits on which lock, for how long), at a cost too small to measure.
// It returns the function that stops it.
func serveDebug(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("TOLLGATE_DEBUG_ADDR: %w", err)
	}
	runtime.SetMutexProfileFraction(100)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	log.Info("profiler serving", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
