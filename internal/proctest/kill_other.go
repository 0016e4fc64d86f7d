//go:build !linux

package proctest

import "syscall"

// killWithParent has no portable equivalent off Linux; cleanups stop the
// process.
func killWithParent() *syscall.SysProcAttr { return new(syscall.SysProcAttr) }
