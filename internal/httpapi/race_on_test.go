//go:build race

package httpapi

// raceDetector is set when the tests run under the race detector, which
// makes sync.Pool drop what it holds at random: allocation counts then say
// nothing about the code.
const raceDetector = true
