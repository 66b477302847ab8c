package mailtest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill mailpit when the test binary that
// started it dies, even by SIGKILL, so that none outlives its tests (as
// stripemocktest does).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
