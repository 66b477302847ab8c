// Package archtest holds the test that keeps Tollgate's import arrows
// pointing downward (DESIGN §6, STYLE "Imports flow one way"). It has no code
// of its own.
package archtest
