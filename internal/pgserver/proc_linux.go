package pgserver

import (
	"os/exec"
	"syscall"
)

// sigFastShutdown asks postgres for a fast shutdown: roll back open
// transactions and stop at once.
const sigFastShutdown = syscall.SIGINT

func setOwner(cmd *exec.Cmd, owner *ids) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if owner != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(owner.uid), Gid: uint32(owner.gid)}
	}
}

// dieWithParent makes the server stop when the process that started it dies,
// even by SIGKILL, so a killed test or demo leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
}

// ownSession starts the server in a session of its own, so the terminal's
// SIGINT does not reach it and it survives this process.
func ownSession(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
}
