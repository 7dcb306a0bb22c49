package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/pgbouncertest"
	"github.com/reconcile/reconcile/internal/pgserver"
)

// floor times `status` on the big ledger against what any short command
// pays before it reads a row, alternating them o.floor times each: the
// process's start (`reconcile version`), a connection and one statement
// from C (`psql -c 'SELECT 1'`, when the cluster's binaries include psql),
// and `status` through a session-mode PgBouncer, whose server connection is
// already warm. On a small virtual machine the first two are most of
// `status`'s time, whatever the ledger's size.
func floor(o options, c *pgserver.Cluster, bin string) error {
	direct := c.ConnString("big")
	type row struct {
		name string
		cmd  []string
		env  []string
	}
	rows := []row{
		{"reconcile version (the process's start)", []string{bin, "version"}, os.Environ()},
	}
	if dir, err := pgserver.FindBinaries(); err == nil {
		if psql := filepath.Join(dir, "psql"); executable(psql) {
			rows = append(rows, row{"psql -c 'SELECT 1' (a connection, one statement)", []string{psql, "-X", "-Atc", "SELECT 1", direct}, os.Environ()})
		}
	}
	rows = append(rows, row{"status", []string{bin, "status", "--log-level", "error"}, append(os.Environ(), "DATABASE_URL="+direct)})
	bouncer, through, err := pgbouncertest.Run(direct, pgbouncertest.Config{PoolMode: "session", PoolSize: 1})
	if err != nil {
		fmt.Printf("\nstatus through PgBouncer not measured: %v\n", err)
	} else {
		defer bouncer.Stop()
		rows = append(rows, row{"status through PgBouncer (session mode)", []string{bin, "status", "--log-level", "error"}, append(os.Environ(), "DATABASE_URL="+through)})
	}

	fmt.Printf("\nstatus on the big ledger against the floor of any command, %d runs each, alternating; load average: %s", o.floor, loadavg())
	walls := make([][]time.Duration, len(rows))
	for i := -1; i < o.floor; i++ {
		for j, r := range rows {
			cmd := exec.Command(r.cmd[0], r.cmd[1:]...)
			cmd.Env = r.env
			t0 := time.Now()
			out, err := cmd.CombinedOutput()
			wall := time.Since(t0)
			if err != nil {
				return fmt.Errorf("%s: %v: %s", strings.Join(r.cmd, " "), err, out)
			}
			if i >= 0 { // the first round warms the page cache and the pooler
				walls[j] = append(walls[j], wall)
			}
		}
	}
	for j, r := range rows {
		fmt.Printf("%-52s %s\n", r.name, spread(walls[j]))
	}
	fmt.Printf("load average at the end: %s", loadavg())
	return nil
}

// executable reports whether path is a file someone may run.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
