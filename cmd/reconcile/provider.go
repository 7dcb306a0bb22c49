package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// loadProfile returns the profile chosen by --profile, else
// RECONCILE_PROVIDER_PROFILE, else the built-in reconcile contract. A bad
// profile is bad input.
func loadProfile(e *env, flagValue string) (*profile.Profile, error) {
	name := flagValue
	if name == "" {
		name = e.getenv("RECONCILE_PROVIDER_PROFILE")
	}
	if name == "" {
		name = profile.DefaultName
	}
	p, err := profile.Load(name)
	if err != nil {
		return nil, usageError(err)
	}
	return p, nil
}

// providerConfig is the client configuration of a profile: the base URL
// (the flag, else RECONCILE_PROVIDER_URL, else the profile's default) and
// the credentials from the environment variables the profile names.
func providerConfig(e *env, p *profile.Profile, urlFlag string, timeout time.Duration, insecure bool) provider.Config {
	a := p.Auth
	get := func(name string) provider.Secret {
		if name == "" {
			return ""
		}
		return provider.Secret(e.getenv(name))
	}
	baseURL := urlFlag
	if baseURL == "" {
		baseURL = e.getenv("RECONCILE_PROVIDER_URL")
	}
	return provider.Config{BaseURL: baseURL, Profile: p, Timeout: timeout, InsecureSkipVerify: insecure,
		Token: get(a.TokenEnv), Username: get(a.UsernameEnv), Password: get(a.PasswordEnv),
		ClientID: get(a.ClientIDEnv), ClientSecret: get(a.ClientSecretEnv)}
}

func cmdProvider(ctx context.Context, e *env, args []string) error {
	const usage = "usage: reconcile provider profiles | reconcile provider check --profile P --id ID"
	if len(args) == 0 {
		return usageErrorf("provider: no subcommand (%s)", usage)
	}
	switch args[0] {
	case "profiles":
		return cmdProviderProfiles(e, args[1:])
	case "check":
		return cmdProviderCheck(ctx, e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, "Usage: reconcile provider profiles\n       reconcile provider check --profile P --id ID\n\n"+
			"List the built-in provider profiles, or check one against the provider with one call.\n"+
			"Run `reconcile provider check --help` for its flags.\n")
		return nil
	}
	return usageErrorf("provider: unknown subcommand %q (%s)", args[0], usage)
}

func cmdProviderProfiles(e *env, args []string) error {
	fs := newFlagSet(e, "provider profiles", "",
		"List the built-in provider profiles: their name, default base URL, auth strategy, the\n"+
			"environment variables their credentials come from, and what they are for.\n"+
			"`consume --profile NAME` uses one; --profile FILE a profile file (see docs/providers.md).",
		"reconcile provider profiles")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBASE URL\tAUTH\tENVIRONMENT\tDESCRIPTION")
	for _, name := range profile.BuiltinNames() {
		p, _ := profile.Builtin(name)
		def := ""
		if name == profile.DefaultName {
			def = " (default)"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\n", name, def, orDash(p.BaseURL), p.Auth.Type, strings.Join(p.Auth.Env(), ","), p.Description)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cmdProviderCheck(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "provider check", "--profile P --id ID [--kind K --account A] [--expect-amount N --expect-currency C --expect-status S]",
		`Make one lookup with a profile and print what happened: the request (credentials
redacted), the provider's raw answer, the record extracted in the ledger's terms and
the decision the consumer would take, against the expected payment when given.
The tool for writing a profile. Credentials come from the environment variables the
profile names (see reconcile provider profiles).`,
		"RECONCILE_PROVIDER_TOKEN=sk_test_... reconcile provider check --profile stripe --id pi_3MtwBwLkdIwHu7ix28a3tqPa")
	prof := fs.String("profile", "", "profile: a built-in name or a profile file (default $RECONCILE_PROVIDER_PROFILE, else reconcile)")
	id := fs.String("id", "", "transaction id to look up")
	kind := fs.String("kind", "", "the row's kind: payment, refund or dispute (default: by the profile's id prefixes, else payment)")
	account := fs.String("account", "", "the row's account_id, for {account} in the profile's request (Stripe-Account)")
	url := fs.String("provider-url", "", "provider base URL (default $RECONCILE_PROVIDER_URL, else the profile's)")
	timeout := fs.Duration("timeout", 10*time.Second, "overall timeout of the call")
	insecure := fs.Bool("insecure-skip-verify", false, "DANGEROUS: do not verify the provider's TLS certificate")
	amount := fs.Int64("expect-amount", 0, "expected amount in minor units")
	currency := fs.String("expect-currency", "", "expected currency")
	status := fs.String("expect-status", "", "expected ledger status")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return usageErrorf("provider check: --id is required")
	}
	if *kind != "" && !payments.IsKind(*kind) {
		return usageErrorf("provider check: --kind %q: want one of %s", *kind, strings.Join(payments.Kinds(), ", "))
	}
	p, err := loadProfile(e, *prof)
	if err != nil {
		return err
	}
	client, err := provider.New(providerConfig(e, p, *url, *timeout, *insecure))
	if err != nil {
		return usageError(fmt.Errorf("provider check: %w", err))
	}
	key := "check:" + *id
	ex, resp, callErr := client.Check(ctx, provider.Lookup{TransactionID: *id, IdempotencyKey: key, Kind: *kind, AccountID: *account})
	w := e.stdout
	fmt.Fprintf(w, "profile: %s (%s)\n\n", p.Name, p.Source)
	fmt.Fprintf(w, "request:\n  %s %s\n", orDash(ex.Method), orDash(ex.URL))
	printHeader(w, ex.RequestHeader)
	if ex.RequestBody != "" {
		fmt.Fprintf(w, "  body: %s\n", ex.RequestBody)
	}
	fmt.Fprintln(w, "\nanswer:")
	if resp.Status != 0 {
		fmt.Fprintf(w, "  HTTP %d %s\n", resp.Status, http.StatusText(resp.Status))
		printHeader(w, resp.Header)
		fmt.Fprintf(w, "  body: %s\n", strings.TrimSpace(strings.ToValidUTF8(string(ex.Body), "\uFFFD")))
	} else {
		fmt.Fprintln(w, "  none")
	}
	fmt.Fprintln(w, "\nextracted:")
	switch {
	case resp.Class != 0:
		fmt.Fprintf(w, "  error rule matched: class %s", resp.Class)
		if resp.Reason != "" {
			fmt.Fprintf(w, ", reason %s", resp.Reason)
		}
		fmt.Fprintln(w)
	case resp.Record.ID != "" || resp.ProviderStatus != "":
		rec, _ := json.Marshal(resp.Record)
		fmt.Fprintf(w, "  %s %s (provider status %q", resp.Kind, rec, resp.ProviderStatus)
		if resp.Rule != "" {
			fmt.Fprintf(w, "; status and amount by %s", resp.Rule)
		}
		fmt.Fprintln(w, ")")
	default:
		fmt.Fprintln(w, "  nothing")
	}
	if callErr != nil {
		fmt.Fprintf(w, "  error: %v\n", callErr)
	}
	expected := provider.Record{ID: *id, AmountMinor: *amount, Currency: *currency, Status: *status}
	if *currency == "" {
		expected.Currency = resp.Record.Currency
	}
	if *status == "" {
		expected.Status = resp.Record.Status
	}
	if *amount == 0 && !flagSet(fs.Visit, "expect-amount") {
		expected.AmountMinor = resp.Record.AmountMinor
	}
	d := decision.Decide(decision.Policy{}.WithDefaults(), decision.Input{Expected: expected, Response: resp, Err: callErr,
		Attempt: 1, Now: time.Now()}, func() float64 { return 0.5 })
	fmt.Fprintf(w, "\ndecision: %s", d.Action)
	if d.Outcome != "" {
		fmt.Fprintf(w, " %s", d.Outcome)
	}
	fmt.Fprintf(w, " (reason %s)", d.Reason)
	if d.Delay > 0 {
		fmt.Fprintf(w, ", retry in %s", d.Delay)
	}
	fmt.Fprintln(w)
	for _, diff := range d.Differences {
		fmt.Fprintf(w, "  %s: expected %s, provider %s\n", diff.Field, diff.Expected, diff.Provider)
	}
	if d.Detail != "" {
		fmt.Fprintf(w, "  detail: %s\n", d.Detail)
	}
	switch kind, _ := circuit.Classify(resp, callErr); kind {
	case circuit.NotFound:
		fmt.Fprintf(w, "  note: no rule of the profile recognises this as the provider's own not-found answer; when the first %d items of a run are all answered so, a consumer stops its calls (stop_after_not_found)\n",
			p.StopAfterNotFound)
	case circuit.WrongAccount:
		fmt.Fprintln(w, "  note: the credentials are for another mode or account than the object; a consumer stops its calls at once")
	}
	return nil
}

func flagSet(visit func(func(*flag.Flag)), name string) bool {
	found := false
	visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// printHeader prints headers sorted by name; a request's credentials are
// redacted already.
func printHeader(w io.Writer, h http.Header) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
}
