//go:build unix

package pglocal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// account is the unprivileged OS user that runs initdb and postgres when the
// caller is root.
type account struct {
	name     string
	uid, gid int
	groups   []int
}

// runAs returns the user to run the cluster as: nil, meaning the caller, unless
// the caller is root, which initdb and postgres refuse.
func runAs() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("as root, initdb and postgres must run as an unprivileged user and there is no user postgres: create it (useradd --system --user-group postgres) or run as a normal user")
	}
	a := &account{name: u.Username}
	if a.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("user postgres: uid %q: %w", u.Uid, err)
	}
	if a.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("user postgres: gid %q: %w", u.Gid, err)
	}
	if a.uid == 0 {
		return nil, errors.New("user postgres has uid 0; it must be unprivileged")
	}
	ids, _ := u.GroupIds()
	for _, id := range ids {
		if g, err := strconv.Atoi(id); err == nil {
			a.groups = append(a.groups, g)
		}
	}
	if !slices.Contains(a.groups, a.gid) {
		a.groups = append(a.groups, a.gid)
	}
	return a, nil
}

// checkReach fails unless dir and each of its parents is searchable by a,
// judged by mode bits, naming the first that is not.
func (a *account) checkReach(dir string) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !a.canSearch(fi) {
			return fmt.Errorf("user %s, which runs postgres for root, cannot reach it: %s (mode %04o, owner uid %d) is not searchable by it; choose a directory it can reach (for example under /tmp or /var/tmp) or grant access (chmod o+x %s): %w",
				a.name, p, fi.Mode().Perm(), owner(fi), p, ErrUnreachable)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func (a *account) canSearch(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) == a.uid:
		return perm&0o100 != 0
	case slices.Contains(a.groups, int(st.Gid)):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// checkOwns fails unless a owns the cluster in dir, as postgres requires.
func (a *account) checkOwns(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if uid := owner(fi); uid != a.uid {
		return fmt.Errorf("the cluster is owned by uid %d, not by user %s, which runs postgres for root; give it over (chown -R %s: %s) or use another directory", uid, a.name, a.name, dir)
	}
	return nil
}

func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// procAttr returns the attributes of an initdb or postgres process: run as a
// when set, in a process group of its own so that a terminal's Ctrl-C reaches
// only the caller, which then stops the server in its own order, and, for the
// server, shut down when the caller dies (Linux only).
func (a *account) procAttr(server bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if server {
		setDeathSignal(attr)
	}
	if a != nil {
		cred := &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid)}
		for _, g := range a.groups {
			cred.Groups = append(cred.Groups, uint32(g))
		}
		attr.Credential = cred
	}
	return attr
}

// signalZero reports, by a nil error, that p is alive.
func signalZero(p *os.Process) error {
	return p.Signal(syscall.Signal(0))
}
