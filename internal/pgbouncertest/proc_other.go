//go:build unix && !linux

package pgbouncertest

import "syscall"

func dieWithParent(*syscall.SysProcAttr) {}
