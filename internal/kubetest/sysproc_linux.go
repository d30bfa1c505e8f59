package kubetest

import "syscall"

// sysProcAttr makes the kernel kill a server if the test binary dies without stopping it (a
// timeout panic, a SIGKILL), so no apiserver or etcd outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
