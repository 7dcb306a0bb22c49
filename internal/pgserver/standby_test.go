package pgserver

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStandbyFailover starts a primary and a standby, writes on the
// primary, kills it, promotes the standby and writes there through a
// multi-host connection string that names both.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })

	both := "host=" + primary.SocketDir() + "," + standby.SocketDir() +
		" port=5432,5432 user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write"
	conn, err := pgx.Connect(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t AS SELECT 1 AS x"); err != nil {
		t.Fatal(err)
	}
	// The insert position: with synchronous_commit off the commit may not
	// be written yet, and the standby receives only written WAL.
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	// The standby is read-only and replays the table.
	sconn, err := pgx.Connect(ctx, standby.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(ctx)
	var replayed bool
	for !replayed {
		if err := sconn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&replayed); err != nil {
			t.Fatal(err)
		}
		if !replayed {
			select {
			case <-ctx.Done():
				t.Fatal("the standby did not replay the primary's table")
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if _, err := sconn.Exec(ctx, "INSERT INTO t VALUES (2)"); err == nil {
		t.Fatal("the standby accepted a write before its promotion")
	}

	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if primary.Running() {
		t.Fatal("the primary still runs after Kill")
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("after the failover t has %d rows, want 2", n)
	}
}
