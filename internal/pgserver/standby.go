package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/jackc/pgx/v5"
)

// StartStandby takes a base backup of c (`pg_basebackup -R`, the WAL
// streamed alongside) into a fresh temporary directory and starts it as a
// hot standby that streams from c, with a socket directory of its own and
// c's settings. Its ConnString reaches it; it is read-only until Promote.
// Stop it like any cluster.
func (c *Cluster) StartStandby(ctx context.Context) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "reconcile-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("create standby directory: %w", err)
	}
	s := &Cluster{dir: dir, exited: make(chan struct{}), logger: c.logger, logFile: filepath.Join(dir, "postgres.log"),
		cfg: c.cfg, owner: c.owner}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if c.owner != nil {
		if err := os.Chown(dir, c.owner.uid, c.owner.gid); err != nil {
			return nil, fmt.Errorf("hand standby directory to user postgres: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	backup := exec.CommandContext(ctx, filepath.Join(c.cfg.BinDir, "pg_basebackup"),
		"-D", data, "-R", "-X", "stream", "-c", "fast", "--no-sync",
		"-h", c.dir, "-p", "5432", "-U", superuser)
	backup.Env = append(os.Environ(), "LC_ALL=C")
	setOwner(backup, c.owner)
	if out, err := backup.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup of %s: %w: %s", c.dir, err, lastLines(out, 5))
	}
	if err := s.launch(ctx); err != nil {
		return nil, fmt.Errorf("start standby: %w", err)
	}
	ok = true
	c.logger.Debug("throwaway standby started", "dir", dir, "primary", c.dir)
	return s, nil
}

// Promote ends recovery on a standby, so that it accepts writes, and waits
// (at most 60 s, pg_promote's own limit) until it does.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.ConnString(superuser))
	if err != nil {
		return fmt.Errorf("promote standby: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(wait => true, wait_seconds => 60)").Scan(&promoted); err != nil {
		return fmt.Errorf("promote standby: %w", err)
	}
	if !promoted {
		return errors.New("promote standby: not promoted within 60s")
	}
	c.logger.Debug("throwaway standby promoted", "dir", c.dir)
	return nil
}

// Kill stops the server the way a failing machine does: SIGKILL to the
// postmaster, no shutdown checkpoint, no goodbye to clients or standbys (its
// backends exit when they notice the postmaster is gone). The data
// directory stays until Stop.
func (c *Cluster) Kill() error {
	if !c.Running() {
		return nil
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill postgres: %w", err)
	}
	<-c.exited
	c.logger.Debug("throwaway postgres killed", "dir", c.dir)
	return nil
}
