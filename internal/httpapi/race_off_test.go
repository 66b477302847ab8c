//go:build !race

package httpapi

// raceDetector is set when the tests run under the race detector (see
// race_on_test.go).
const raceDetector = false
