//go:build unix

package pgbouncertest

import (
	"os/exec"
	"syscall"
)

// setProcAttr runs cmd as owner, when set, and stops it when the test
// process dies (on Linux), so a killed test leaves no pgbouncer behind.
func setProcAttr(cmd *exec.Cmd, owner *ids) {
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if owner != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(owner.uid), Gid: uint32(owner.gid)}
	}
	dieWithParent(cmd.SysProcAttr)
}
