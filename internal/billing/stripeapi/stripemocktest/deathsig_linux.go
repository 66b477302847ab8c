package stripemocktest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill stripe-mock when the test binary that
// started it dies, even by SIGKILL, so that none outlives its tests. Linux
// sends it when the starting OS thread exits; Go keeps its threads for the
// life of the process unless a goroutine locked to one exits.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
