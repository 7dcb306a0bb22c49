package schedule

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/payments"
)

// Source is the input of one business date.
type Source struct {
	// Name is recorded as the run's source: a file path or table:NAME.
	Name string
	// Format is the input's syntax.
	Format payments.Format
	// Open opens the input; the enqueuer calls it only when it creates the
	// run.
	Open func() (io.ReadCloser, error)
}

// SourceFunc returns the source of a business date.
type SourceFunc func(d payments.Date) Source

// DatePlaceholder is replaced by the business date (YYYY-MM-DD) in a file
// template.
const DatePlaceholder = "{date}"

// FileTemplate returns the files named by template, with every {date}
// replaced by the business date: /data/payments-{date}.csv. The format
// follows the extension (.jsonl or .ndjson for JSON Lines, CSV otherwise).
func FileTemplate(template string) (SourceFunc, error) {
	if !strings.Contains(template, DatePlaceholder) {
		return nil, fmt.Errorf("source template %q has no %s placeholder: every date would read the same file", template, DatePlaceholder)
	}
	return func(d payments.Date) Source {
		name := strings.ReplaceAll(template, DatePlaceholder, d.String())
		return Source{Name: name, Format: payments.FormatFor(name), Open: func() (io.ReadCloser, error) {
			return os.Open(name)
		}}
	}, nil
}

// identifierPart is one part of an unquoted SQL identifier, without its
// length limit (maxIdentifier): a bounded repetition would compile into a
// program 63 states long when the binary starts, whatever command it runs.
var identifierPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxIdentifier is PostgreSQL's longest identifier in bytes (NAMEDATALEN - 1).
const maxIdentifier = 63

// ParseTableName validates a table name given as NAME or SCHEMA.NAME, each
// part a plain SQL identifier (letters, digits, underscores; not starting
// with a digit; at most 63 bytes), and returns it ready to quote.
func ParseTableName(name string) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("table name %q: want NAME or SCHEMA.NAME", name)
	}
	for _, p := range parts {
		if !identifierPart.MatchString(p) || len(p) > maxIdentifier {
			return nil, fmt.Errorf("table name %q: %q is not a plain identifier (letters, digits and _, not starting with a digit)", name, p)
		}
	}
	return pgx.Identifier(parts), nil
}

// Table returns the rows of a Postgres table (or view) as the source of a
// date: those whose occurred_at falls within the date in loc, [00:00, next
// 00:00). The table needs the six payment columns (transaction_id,
// account_id, amount_minor, currency, status, occurred_at, with occurred_at a
// timestamptz); other columns are ignored. Rows are streamed as CSV into the
// same validation as a file, so a NULL or bad value is reported with its row
// number, and the run's source is table:NAME.
func Table(pool *pgxpool.Pool, name string, loc *time.Location) (SourceFunc, error) {
	ident, err := ParseTableName(name)
	if err != nil {
		return nil, err
	}
	query := `SELECT transaction_id::text, account_id::text, amount_minor::text, currency::text, status::text, occurred_at
	            FROM ` + ident.Sanitize() + `
	           WHERE occurred_at >= $1 AND occurred_at < $2
	           ORDER BY occurred_at, transaction_id`
	return func(d payments.Date) Source {
		return Source{Name: "table:" + name, Format: payments.FormatCSV, Open: func() (io.ReadCloser, error) {
			return openTable(pool, query, "table:"+name, d.Start(loc), d.End(loc)), nil
		}}
	}, nil
}

// openTable runs query and renders its rows as CSV through a pipe. Closing
// the reader stops the query.
func openTable(pool *pgxpool.Pool, query, name string, from, to time.Time) io.ReadCloser {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(copyTable(ctx, pool, query, name, from, to, pw))
	}()
	return &tableReader{PipeReader: pr, cancel: cancel, done: done}
}

func copyTable(ctx context.Context, pool *pgxpool.Pool, query, name string, from, to time.Time, w io.Writer) error {
	rows, err := pool.Query(ctx, query, from, to)
	if err != nil {
		return fmt.Errorf("query %s: %w", name, err)
	}
	defer rows.Close()
	cw := csv.NewWriter(w)
	header := []string{payments.FieldTransactionID, payments.FieldAccountID, payments.FieldAmountMinor,
		payments.FieldCurrency, payments.FieldStatus, payments.FieldOccurredAt}
	if err := cw.Write(header); err != nil {
		return err
	}
	rec := make([]string, 6)
	for rows.Next() {
		var id, account, amount, currency, status *string
		var at *time.Time
		if err := rows.Scan(&id, &account, &amount, &currency, &status, &at); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		for i, v := range []*string{id, account, amount, currency, status} {
			rec[i] = ""
			if v != nil {
				rec[i] = *v
			}
		}
		rec[5] = ""
		if at != nil {
			rec[5] = at.UTC().Format(time.RFC3339Nano)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	cw.Flush()
	return cw.Error()
}

// tableReader is the reading end of a table's CSV rendering.
type tableReader struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

// Close stops the query and releases its connection.
func (r *tableReader) Close() error {
	r.cancel()
	err := r.PipeReader.Close()
	<-r.done
	if errors.Is(err, io.ErrClosedPipe) {
		return nil
	}
	return err
}
