package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/audit"
)

// cmdAudit is `reconcile audit verify|grant`.
func cmdAudit(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(e.usageOut(args), `Usage: reconcile audit <verify|grant> [flags]

  verify [--date D | --run ID] [--json]   recompute the ledger's hash chains; exit 1 on a broken link
  grant [--console] ROLE                  make an existing login role a read-only auditor
                                          (with --console: the role the web console connects with)

Run `+"`reconcile audit verify -h`"+` for details.
`)
		if len(args) == 0 {
			return usageErrorf("audit: no action given (verify or grant)")
		}
		return nil
	}
	switch args[0] {
	case "verify":
		return cmdAuditVerify(ctx, e, args[1:])
	case "grant":
		return cmdAuditGrant(ctx, e, args[1:])
	default:
		return usageErrorf("audit: unknown action %q (want verify or grant)", args[0])
	}
}

func cmdAuditVerify(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "audit verify", "[--date D | --run ID] [--json]",
		"Recompute the hash chain of every transition of the selected runs (default: all) and compare it\n"+
			"with the stored hashes and items.history_len/history_head. Prints the first broken link and exits 1\n"+
			"when the history was changed after it was written. Each run's digest can be recorded elsewhere\n"+
			"and compared later.",
		"reconcile audit verify --date 2026-10-24")
	date := fs.String("date", "", "verify every generation of this business date (YYYY-MM-DD)")
	runID := fs.String("run", "", "verify this run (UUID)")
	asJSON := fs.Bool("json", false, "print the full report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var f audit.Filter
	if *date != "" && *runID != "" {
		return usageErrorf("audit verify: give --date or --run, not both")
	}
	if *date != "" {
		d, err := time.Parse(time.DateOnly, *date)
		if err != nil {
			return usageErrorf("audit verify: --date %q: want YYYY-MM-DD", *date)
		}
		f.BusinessDate = &d
	}
	if *runID != "" {
		id, err := uuid.Parse(*runID)
		if err != nil {
			return usageErrorf("audit verify: --run %q: want a run UUID", *runID)
		}
		f.RunID = &id
	}
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	rep, err := audit.Verify(ctx, pool, f)
	if err != nil {
		return err
	}
	if len(rep.Runs) == 0 && (f.BusinessDate != nil || f.RunID != nil) {
		if f.RunID != nil {
			return usageErrorf("audit verify: no run %s", *runID)
		}
		return usageErrorf("audit verify: no run for business date %s", *date)
	}
	if *asJSON {
		if rep.Breaks == nil {
			rep.Breaks = []audit.Break{}
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else {
		for _, r := range rep.Runs {
			status := "ok"
			if r.BrokenItems > 0 {
				status = fmt.Sprintf("BROKEN (%d items)", r.BrokenItems)
			}
			fmt.Fprintf(e.stdout, "%s  %s g%d  %d items  %d transitions  digest %s  %s\n",
				r.RunID, r.BusinessDate, r.Generation, r.Items, r.Transitions, r.Digest, status)
		}
		fmt.Fprintf(e.stdout, "verified %d run(s), %d item(s), %d transition(s)\n", len(rep.Runs), rep.Items, rep.Transitions)
		for _, b := range rep.Breaks {
			fmt.Fprintf(e.stdout, "broken: %s\n", b)
		}
		if n := rep.BrokenItems + rep.BrokenRuns - int64(len(rep.Breaks)); n > 0 {
			fmt.Fprintf(e.stdout, "... and %d more\n", n)
		}
	}
	if !rep.OK() {
		return fmt.Errorf("audit verify: history was altered (%d broken item(s), %d run(s) with a wrong item count); first broken link: %s",
			rep.BrokenItems, rep.BrokenRuns, rep.Breaks[0])
	}
	return nil
}

func cmdAuditGrant(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "audit grant", "[--console] ROLE",
		"Make the existing login ROLE a member of reconcile_auditor: SELECT on the ledger tables and the\n"+
			"auditor views, nothing else. With --console, a member of reconcile_console instead: what\n"+
			"`reconcile ui` needs (the auditor's reads, the queue's and limiters' rows its pages show, its\n"+
			"sessions, and the writes of its actions), nothing else. Run it as the schema owner or a role\n"+
			"allowed to grant roles.",
		"reconcile audit grant --console reconcile_ui")
	console := fs.Bool("console", false, "grant reconcile_console, the web console's role, instead of the auditor's")
	// The role name is the one positional argument; flags may come first.
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("audit grant: want exactly one role name, got %d arguments (see reconcile audit grant --help)", fs.NArg())
	}
	role := fs.Arg(0)
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	grant, group, what := audit.Grant, audit.AuditorRole, "it can read the ledger and nothing else"
	if *console {
		grant, group, what = audit.GrantConsole, audit.ConsoleRole, "it can run the web console (reconcile ui) and nothing else"
	}
	if err := grant(ctx, pool, role); err != nil {
		if errors.Is(err, audit.ErrNoRole) {
			return usageError(err)
		}
		return err
	}
	fmt.Fprintf(e.stdout, "granted %s to %s: %s\n", group, role, what)
	return nil
}
