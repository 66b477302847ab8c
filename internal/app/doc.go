// Package app is Tollgate's composition root: the one place that builds the
// service from its configuration (the stores, the gate, the HTTP API, the
// dashboard, the webhook workers and the background loops), serves it and
// shuts it down in order. `tollgate serve` and the in-process test harnesses
// call it, so that a test runs the service wired the way production is.
//
// app sees every package, adapters and drivers included; only cmd/tollgate
// and tests import it (internal/archtest). It reads no environment: its
// Config is filled by cmd/tollgate.
package app
