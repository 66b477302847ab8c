//go:build unix && !linux

package pglocal

import "syscall"

// setDeathSignal does nothing: only Linux can signal a child when its parent
// dies. A server left behind by a crash is reported by the next Start.
func setDeathSignal(*syscall.SysProcAttr) {}
