// Command bare is the yardstick of scripts/bench-check.sh: a net/http
// handler that answers every request 200 with a fixed small JSON body, the
// least an HTTP service on this machine can do per request. Tollgate's
// throughput is reported as a ratio to it, measured in the same run.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18180", "listen address")
	flag.Parse()
	body := []byte(`{"allowed":true,"degraded":false,"items":[{"policy":"bench","allowed":true,"limit":1000000000,"remaining":999999999,"reset_at":"2026-12-01T01:00:00Z","retry_after_ms":0,"shadow":false}]}` + "\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
