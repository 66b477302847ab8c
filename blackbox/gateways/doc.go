// Package gateways tests Tollgate as the forward-auth service of real
// proxies: Debian's nginx and Caddy, run as child processes on free ports
// with the recipes of docs/gateways.md (read from the doc, only the
// addresses and the key replaced), in front of a small upstream, with two
// Tollgate instances on one database behind them. It has no code of its
// own; the tests are in gateways_test.go.
package gateways
