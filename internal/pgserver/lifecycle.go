package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Halt shuts the server down (fast mode: open transactions are rolled back
// and clients disconnected) but keeps its data directory, so Restart can
// bring the same cluster back. It is for tests that take the database away
// from running clients. Calling Halt on a halted cluster does nothing.
func (c *Cluster) Halt() error {
	select {
	case <-c.exited:
		return nil
	default:
	}
	if err := c.cmd.Process.Signal(sigFastShutdown); err != nil {
		return fmt.Errorf("halt postgres: %w", err)
	}
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return errors.New("halt postgres: no fast shutdown within 30s; killed it")
	}
	c.logger.Debug("throwaway postgres halted", "dir", c.dir)
	return nil
}

// Running reports whether the server process is running.
func (c *Cluster) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Restart starts a halted cluster again on the same data directory and
// socket, with the same settings, and waits until it accepts connections.
// Clients that keep the connection string reconnect to it. Halt and Restart
// must not be called concurrently with each other or with Stop.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.Running() {
		return errors.New("restart postgres: the server is still running; Halt it first")
	}
	logf, err := os.OpenFile(c.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("restart postgres: open server log: %w", err)
	}
	defer logf.Close()
	prev := c.cmd
	cmd := exec.Command(prev.Path, prev.Args[1:]...)
	cmd.Env = prev.Env
	cmd.SysProcAttr = prev.SysProcAttr
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c.cmd, c.exited = cmd, exited
	if err := c.waitReady(ctx); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("restart postgres: %w", err)
	}
	c.logger.Debug("throwaway postgres restarted", "dir", c.dir)
	return nil
}
