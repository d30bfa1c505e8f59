//go:build !linux

package kubetest

import "syscall"

// sysProcAttr has nothing to add where the kernel cannot tie a child's life to its parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
