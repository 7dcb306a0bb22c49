package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/reconcile/reconcile/internal/pgbouncertest"
	"github.com/reconcile/reconcile/internal/pgserver"
)

// floor times `status` on the big ledger against what any short command
// pays before it reads a row, alternating them o.floor times each: the
// process's start (`reconcile version`), a connection and one statement
// from C (`psql -c 'SELECT 1'`, when the cluster's binaries include psql),
// and `status` through a session-mode PgBouncer, whose server connection is
// already warm. The caller has left a run open on the big ledger, so
// `status` reads a night in progress (its open items too), its costlier
// case; the table of the two ledgers has it with every run complete.
func floor(o options, c *pgserver.Cluster, bin string) error {
	direct := c.ConnString("big")
	names := []string{"reconcile version (the process's start)"}
	invs := []invocation{{env: os.Environ(), argv: []string{bin, "version"}}}
	if dir, err := pgserver.FindBinaries(); err == nil {
		if psql := filepath.Join(dir, "psql"); executable(psql) {
			names = append(names, "psql -c 'SELECT 1' (a connection, one statement)")
			invs = append(invs, invocation{env: os.Environ(), argv: []string{psql, "-X", "-Atc", "SELECT 1", direct}})
		}
	}
	names = append(names, "status, a run open")
	invs = append(invs, reconcileCmd(bin, append(os.Environ(), "DATABASE_URL="+direct), "status"))
	bouncer, through, err := pgbouncertest.Run(direct, pgbouncertest.Config{PoolMode: "session", PoolSize: 1})
	if err != nil {
		fmt.Printf("\nstatus through PgBouncer not measured: %v\n", err)
	} else {
		defer bouncer.Stop()
		names = append(names, "status, a run open, through PgBouncer (session mode)")
		invs = append(invs, reconcileCmd(bin, append(os.Environ(), "DATABASE_URL="+through), "status"))
	}

	fmt.Printf("\nstatus on the big ledger with a run of %d items open, against the floor of any command, %d runs each, alternating; load average: %s",
		o.items, o.floor, loadavg())
	// One round first, not counted: it warms the page cache and the pooler.
	if _, _, err := alternate(1, invs); err != nil {
		return err
	}
	walls, _, err := alternate(o.floor, invs)
	if err != nil {
		return err
	}
	for i, name := range names {
		fmt.Printf("%-56s %s\n", name, spread(walls[i]))
	}
	fmt.Printf("load average at the end: %s", loadavg())
	return nil
}

// executable reports whether path is a file someone may run.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
