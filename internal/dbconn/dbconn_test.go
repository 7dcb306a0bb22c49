package dbconn

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"url without password", "postgres://app@db.internal:5432/reconcile", "postgres://app@db.internal:5432/reconcile"},
		{"url password", "postgres://app:s3cret@db.internal/reconcile", "postgres://app:xxxxx@db.internal/reconcile"},
		{"url password in query", "postgres://app@db.internal/reconcile?password=s3cret&sslmode=require",
			"postgres://app@db.internal/reconcile?password=xxxxx&sslmode=require"},
		{"url both", "postgresql://app:one@db/reconcile?password=two", "postgresql://app:xxxxx@db/reconcile?password=xxxxx"},
		{"multi-host url", "postgres://app:s3cret@h1:5432,h2:5433/reconcile?target_session_attrs=read-write",
			"postgres://app:xxxxx@h1:5432,h2:5433/reconcile?target_session_attrs=read-write"},
		{"unparsable url", "postgres://app:s3c%ret@db:notaport/reconcile", "postgres://app:xxxxx@db:notaport/reconcile"},
		{"password with @", "postgres://app:p@ss@db/reconcile", "postgres://app:xxxxx@db/reconcile"},
		{"keyword/value", "host=db user=app password=s3cret dbname=reconcile", "host=db user=app password=xxxxx dbname=reconcile"},
		{"keyword/value quoted", "host=db password='s3 cr\\'et' dbname=reconcile", "host=db password=xxxxx dbname=reconcile"},
		{"keyword/value spaces and case", "host=db PASSWORD = s3cret", "host=db PASSWORD = xxxxx"},
		{"url without its scheme", "app:s3cret@db/reconcile", "app:xxxxx@db/reconcile"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Redact(tc.in)
			if got != tc.want {
				t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
			for _, secret := range []string{"s3cret", "s3c%ret", "p@ss", "one", "two", "s3 cr"} {
				if strings.Contains(tc.in, secret) && strings.Contains(got, secret) {
					t.Errorf("Redact(%q) = %q still holds %q", tc.in, got, secret)
				}
			}
		})
	}
}

func TestScrubAndOneLine(t *testing.T) {
	t.Parallel()
	msg := "failed to connect to `user=app database=r`:\n\t/tmp/x (db): password s3cret refused\n\t/tmp/x (db): password s3cret refused\n"
	got := oneLine(scrub(msg, "s3cret"))
	want := "failed to connect to `user=app database=r`: /tmp/x (db): password xxxxx refused"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if scrub("unchanged", "") != "unchanged" {
		t.Error("an empty secret changed the text")
	}
}

func TestElideValues(t *testing.T) {
	t.Parallel()
	ids := make([]uuid.UUID, 64)
	for i := range ids {
		ids[i] = uuid.New()
	}
	big := fmt.Errorf("claim 64 messages: %w", fmt.Errorf("failed to encode args[1]: unable to encode %#v into text format for unknown type (OID 0): cannot find encode plan", ids))
	for _, tc := range []struct {
		name string
		in   error
		want string
	}{
		{"uuid array", big, "claim 64 messages: failed to encode args[1]: unable to encode []uuid.UUID{…} into text format for unknown type (OID 0): cannot find encode plan"},
		{"nested brackets", errors.New("rows [[1 2] [3 4]] and {alpha {beta}} end"), "rows […] and {…} end"},
		{"unbalanced close", errors.New("a } b ] c"), "a } b ] c"},
		{"plain", errors.New("ERROR: relation \"x\" does not exist (SQLSTATE 42P01)"), "ERROR: relation \"x\" does not exist (SQLSTATE 42P01)"},
		{"long", errors.New(strings.Repeat("é", 300)), strings.Repeat("é", 200) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ElideValues(tc.in)
			if got.Error() != tc.want {
				t.Errorf("got %q, want %q", got.Error(), tc.want)
			}
			if !errors.Is(got, tc.in) {
				t.Error("errors.Is does not see the original")
			}
		})
	}
	if ElideValues(nil) != nil {
		t.Error("ElideValues(nil) != nil")
	}
}

// TestOpenSaysWhatIsWrongWithTheURL opens malformed connection strings
// holding a password: the error says what is wrong and where, and never
// the password.
func TestOpenSaysWhatIsWrongWithTheURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"postgres://app:s3cret@db:54x2/reconcile", "DATABASE_URL postgres://app:xxxxx@db:54x2/reconcile: invalid port: want a number from 1 to 65535"},
		{"postgres://app:s3%zzcret@db/reconcile", "invalid percent-encoded token in password"},
		{"postgres://app:s3cret@db/reconcile?sslmode=maybe", "sslmode is invalid"},
		{"postgres://app:s3cret@db/reconcile?pool_max_conns=many", `cannot parse pool_max_conns (strconv.ParseInt: parsing "many": invalid syntax)`},
		{"postgres://app:s3cret@db/reconcile?target_session_attrs=sometimes", "unknown target_session_attrs value: sometimes"},
		{"postgress://app:s3cret@db/reconcile", `the scheme is "postgress"; a URL starts postgres:// or postgresql://`},
		{"app:s3cret@db/reconcile", "neither a postgres:// URL nor keyword=value pairs"},
		{"host=db password='s3cret dbname=reconcile", "unterminated quoted string"},
		{"postgres://app:s3 cret@db/reconcile", "unexpected spaces found in password"},
		{"postgres://app:s3cret@[::1/reconcile", `looking for matching "]"`},
	} {
		_, err := Open(t.Context(), Config{URL: tc.url})
		var bad *ConnStringError
		if !errors.As(err, &bad) {
			t.Errorf("Open(%q) = %v, want a ConnStringError", tc.url, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %q, want it to say %q", tc.url, err, tc.want)
		}
		for _, secret := range []string{"s3cret", "s3%zzcret", "s3 cret"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Open(%q): %q holds the password", tc.url, err)
			}
		}
	}
}
