//go:build !linux

package testchain

import "syscall"

// killWithParent has no portable equivalent off Linux; cleanups stop anvil.
func killWithParent() *syscall.SysProcAttr { return new(syscall.SysProcAttr) }
