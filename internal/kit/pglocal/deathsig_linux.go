package pglocal

import "syscall"

// setDeathSignal asks the kernel for a fast shutdown of the server when the
// process that started it dies, even by SIGKILL or a panicking test, so that
// no server outlives its user. Linux sends it when the starting OS thread
// exits; Go keeps its threads for the life of the process, except one whose
// goroutine exits while locked to it, so a caller must not call Start from a
// goroutine locked to its thread that then ends.
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGINT
}
