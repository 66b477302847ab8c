//go:build !linux

package mailtest

import "os/exec"

// setDeathSignal does nothing: only Linux can signal a child when its
// parent dies. The test's cleanup stops mailpit.
func setDeathSignal(*exec.Cmd) {}
