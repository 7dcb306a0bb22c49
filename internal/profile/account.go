package profile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/reconcile/reconcile/internal/payments"
)

// Account says what {account} in a request stands for: the item's
// account_id as the payment file has it, or what an account map makes of
// it, kept only when it has the provider's form of an account. One profile
// so serves every connected account of a platform (Stripe Connect's
// Stripe-Account header) instead of one profile per account, and a game's
// own account ids ("player-17") are never sent as the provider's.
type Account struct {
	// Map maps an item's account_id to the provider's account ("" for the
	// platform's own); nil: the account_id itself. An account_id the map
	// lacks cannot be asked about.
	Map map[string]string
	// MapFile is where Map came from (profile key account.map, or a
	// providers file entry's account_map), for errors.
	MapFile string
	// Match, when set, keeps only values it matches: other accounts are
	// the platform's own and {account} is empty for them (Stripe's
	// connected accounts are acct_ and 16 or more letters and digits; a
	// game's player id is none).
	Match *regexp.Regexp
	// mapLine is the line of account.map in the profile, for errors.
	mapLine int
}

// UnmappedAccountError is an item whose account gives no provider account
// where the request needs one: the account map does not know it, or the
// path needs an account and it is the platform's own. Nothing can be asked
// for it until the map has it. Not a mismatch, a map to fix.
type UnmappedAccountError struct {
	// AccountID is the item's account.
	AccountID string
	// MapFile is the map's file; empty when the map is not the cause.
	MapFile string
}

func (e *UnmappedAccountError) Error() string {
	if e.MapFile == "" {
		return fmt.Sprintf("account %q is no provider account, and the request's path needs one", e.AccountID)
	}
	return fmt.Sprintf("account %q is not in the account map %s", e.AccountID, e.MapFile)
}

// Resolve returns what {account} stands for on an item of accountID: the
// mapped value or the account_id, empty when Match does not match it. The
// error is an [*UnmappedAccountError].
func (a *Account) Resolve(accountID string) (string, error) {
	v := accountID
	if a.Map != nil {
		m, ok := a.Map[accountID]
		if !ok {
			return "", &UnmappedAccountError{AccountID: accountID, MapFile: a.MapFile}
		}
		v = m
	}
	if a.Match != nil && !a.Match.MatchString(v) {
		return "", nil
	}
	return v, nil
}

// MaxAccountMapSize is the largest account map file read, in bytes.
const MaxAccountMapSize = 16 << 20

// LoadAccountMap reads an account map: a JSON object from the payment
// file's account_id to the provider's account, "" for the platform's own,
//
//	{"player-17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""}
//
// Every problem is an [*Error] naming the file, the line and the key: a
// duplicate key, an account_id the payment file could not hold, a value
// that is not a string or holds control characters.
func LoadAccountMap(file string) (map[string]string, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("read account map: %w", err)
	}
	if st.Size() > MaxAccountMapSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("larger than %d bytes", MaxAccountMapSize)}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read account map: %w", err)
	}
	return ParseAccountMap(file, data)
}

// ParseAccountMap parses an account map; file names it in errors. See
// [LoadAccountMap].
func ParseAccountMap(file string, data []byte) (map[string]string, error) {
	root, err := parseTreeLimit(file, data, MaxAccountMapSize)
	if err != nil {
		return nil, err
	}
	d := parser{file: file}
	out := map[string]string{}
	err = d.object(root, "", nil, func(m member, key string) error {
		if msg := payments.CheckID(m.key); msg != "" {
			return &Error{File: file, Line: m.line, Key: key, Msg: "not an account_id a payment file can hold: " + msg}
		}
		v, err := d.str(m.val, key)
		if err != nil {
			return err
		}
		if msg := payments.CheckID(v); v != "" && msg != "" {
			return d.errf(m.val, key, "not a provider account: %s", msg)
		}
		out[m.key] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// loadAccountMap loads the account map the profile names, relative to the
// profile file's directory.
func (p *Profile) loadAccountMap(profileFile string) error {
	if p.Account.MapFile == "" {
		return nil
	}
	path := p.Account.MapFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(profileFile), path)
	}
	m, err := LoadAccountMap(path)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return err
		}
		return &Error{File: profileFile, Line: p.Account.mapLine, Key: "account.map", Msg: err.Error()}
	}
	p.Account.Map, p.Account.MapFile = m, path
	return nil
}
