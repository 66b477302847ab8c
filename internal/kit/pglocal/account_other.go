//go:build !unix

package pglocal

import (
	"errors"
	"os"
	"syscall"
)

// account stands in for the unix run-as user; it is never needed here since
// there is no root to refuse.
type account struct {
	name     string
	uid, gid int
}

func runAs() (*account, error) { return nil, nil }

func (a *account) checkReach(string) error { return nil }

func (a *account) checkOwns(string) error { return nil }

func (a *account) procAttr(bool) *syscall.SysProcAttr { return nil }

func signalZero(*os.Process) error { return errors.New("cannot probe processes here") }
