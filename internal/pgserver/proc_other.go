//go:build !linux

package pgserver

import (
	"os"
	"os/exec"
)

var sigFastShutdown = os.Interrupt

func setOwner(*exec.Cmd, *ids) {}

func dieWithParent(*exec.Cmd) {}

func ownSession(*exec.Cmd) {}
