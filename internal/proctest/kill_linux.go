package proctest

import "syscall"

// killWithParent makes the kernel kill the process if the test binary dies
// without running its cleanups (a -timeout panic, a SIGKILL).
func killWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
