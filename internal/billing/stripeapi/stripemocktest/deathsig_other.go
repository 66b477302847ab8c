//go:build !linux

package stripemocktest

import "os/exec"

// setDeathSignal does nothing: only Linux can signal a child when its parent
// dies. Stop, from Main, ends stripe-mock after the tests.
func setDeathSignal(*exec.Cmd) {}
