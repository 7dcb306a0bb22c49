package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
)

func cmdLimit(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintf(e.usageOut(args), "Usage: reconcile limit show [--provider NAME | --name NAME] [--json]\n       reconcile limit set [--rate R] [--burst B] [--provider NAME | --name NAME]\n\n"+
			"Show or change the provider's rate limit, shared by every consumer through the database.\n"+
			"With a providers file each provider has its own: --provider names it.\n"+
			"Running consumers apply a change within a second. Without a stored setting the limit is\n"+
			"%g requests/s with a burst of %d.\n\n"+
			"Example:\n  reconcile limit set --rate 50 --burst 20\n", limiter.DefaultRate, limiter.DefaultBurst)
		if len(args) == 0 {
			return usageErrorf("limit: want show or set")
		}
		return nil
	}
	switch args[0] {
	case "show":
		return cmdLimitShow(ctx, e, args[1:])
	case "set":
		return cmdLimitSet(ctx, e, args[1:])
	}
	return usageErrorf("limit: unknown action %q: want show or set", args[0])
}

func cmdLimitShow(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "limit show", "[--provider NAME | --name NAME] [--json]",
		"Print the configured rate and burst, the adaptive rate in force, the current penalty and the\n"+
			"number of throttles the consumers have reported.",
		"reconcile limit show --json")
	name := fs.String("name", limiter.DefaultName, "limiter name")
	prov := fs.String("provider", "", "a providers file's provider: its own limiter (provider:NAME)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := limiterFlags(fs, name, *prov); err != nil {
		return err
	}
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := limiter.LoadState(ctx, pool, *name)
	if err != nil {
		return err
	}
	if *asJSON {
		out := struct {
			Name              string     `json:"name"`
			Stored            bool       `json:"stored"`
			Rate              float64    `json:"rate"`
			Burst             int        `json:"burst"`
			EffectiveRate     float64    `json:"effective_rate"`
			PenaltyUntil      *time.Time `json:"penalty_until"`
			Throttles         int64      `json:"throttles"`
			SettingsUpdatedAt *time.Time `json:"settings_updated_at"`
			ExpiresAt         *time.Time `json:"expires_at"`
			RestoreRate       float64    `json:"restore_rate,omitempty"`
			RestoreBurst      int        `json:"restore_burst,omitempty"`
			Refusals          int        `json:"refusals"`
			Estimate          float64    `json:"estimate,omitempty"`
			EstimateBurst     float64    `json:"estimate_burst,omitempty"`
		}{Name: s.Name, Stored: s.Stored, Rate: s.Rate, Burst: s.Burst, EffectiveRate: s.EffectiveRate, Throttles: s.Throttles,
			RestoreRate: s.Restore.Rate, RestoreBurst: s.Restore.Burst,
			Refusals: s.Refusals, Estimate: s.Estimate, EstimateBurst: s.EstimateBurst}
		if !s.ExpiresAt.IsZero() {
			out.ExpiresAt = &s.ExpiresAt
		}
		if !s.PenaltyUntil.IsZero() {
			out.PenaltyUntil = &s.PenaltyUntil
		}
		if s.Stored {
			out.SettingsUpdatedAt = &s.SettingsUpdatedAt
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(e.stdout, "limiter:        %s\n", s.Name)
	if s.Stored {
		fmt.Fprintf(e.stdout, "rate:           %s\nburst:          %d\n", human.Rate(s.Rate), s.Burst)
		fmt.Fprintf(e.stdout, "set at:         %s\n", s.SettingsUpdatedAt.Format(time.RFC3339))
		if !s.ExpiresAt.IsZero() {
			fmt.Fprintf(e.stdout, "until:          %s, then rate %s, burst %d\n", s.ExpiresAt.Format(time.RFC3339), human.Rate(s.Restore.Rate), s.Restore.Burst)
		}
	} else {
		fmt.Fprintf(e.stdout, "rate:           %s (default)\nburst:          %d (default)\n", human.Rate(s.Rate), s.Burst)
	}
	fmt.Fprintf(e.stdout, "effective rate: %s\n", human.Rate(s.EffectiveRate))
	switch {
	case s.Estimate > 0:
		fmt.Fprintf(e.stdout, "measured:       %s with a bucket of %s (the provider refused the limit set %s times)\n",
			human.Rate(s.Estimate), human.Number(s.EstimateBurst), human.Count(int64(s.Refusals)))
	case s.Refusals > 0:
		fmt.Fprintf(e.stdout, "refused:        %s times since it was set (trusted until refused twice)\n", human.Count(int64(s.Refusals)))
	}
	if s.PenaltyLeft > 0 {
		fmt.Fprintf(e.stdout, "penalty until:  %s (%s from now)\n", s.PenaltyUntil.Format(time.RFC3339), human.Duration(s.PenaltyLeft))
	} else {
		fmt.Fprintf(e.stdout, "penalty:        none\n")
	}
	fmt.Fprintf(e.stdout, "throttles:      %s\n", human.Count(s.Throttles))
	return nil
}

func cmdLimitSet(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "limit set", "[--rate R] [--burst B] [--provider NAME | --name NAME]",
		"Set the provider's rate limit (requests per second, the ceiling of the adaptive rate) and burst.\n"+
			"A flag left out keeps its stored value. Running consumers apply the change within a second.",
		"reconcile limit set --provider paypal --rate 50 --burst 20 --reason \"the provider raised our quota\"")
	name := fs.String("name", limiter.DefaultName, "limiter name")
	prov := fs.String("provider", "", "a providers file's provider: its own limiter (provider:NAME)")
	rate := fs.Float64("rate", 0, "requests per second, > 0")
	burst := fs.Int("burst", 0, "requests allowed at once after an idle period, >= 1")
	reason := fs.String("reason", "", "why, recorded with the change in the limiter's history")
	forDur := fs.Duration("for", 0, "keep the new limit this long (e.g. 2h), then restore the one in force before it; 0: until changed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := limiterFlags(fs, name, *prov); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rate"] && !set["burst"] {
		return usageErrorf("limit set: give --rate, --burst or both")
	}
	if set["rate"] && (!(*rate > 0) || math.IsInf(*rate, 0)) {
		return usageErrorf("limit set: --rate %v: want a positive number of requests per second", *rate)
	}
	if set["burst"] && *burst < 1 {
		return usageErrorf("limit set: --burst %d: want at least 1", *burst)
	}
	if *forDur < 0 {
		return usageErrorf("limit set: --for %s: want a positive duration such as 2h", *forDur)
	}
	if *name == "" {
		return usageErrorf("limit set: --name: must not be empty")
	}
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := limiter.LoadSettings(ctx, pool, *name)
	if err != nil {
		return err
	}
	if set["rate"] {
		s.Rate = *rate
	}
	if set["burst"] {
		s.Burst = *burst
	}
	if err := limiter.SaveSettings(ctx, pool, *name, s, limiter.SetBy{Actor: actorName(), Reason: *reason, For: *forDur}); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "limiter %s: rate %s, burst %d", *name, human.Rate(s.Rate), s.Burst)
	if *forDur > 0 {
		fmt.Fprintf(e.stdout, " for %s, then back to what it was (a running consumer restores it)", *forDur)
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// limiterFlags applies --provider NAME to the limiter name: the provider's
// own row. --name and --provider together are a usage error.
func limiterFlags(fs *flag.FlagSet, name *string, prov string) error {
	if prov == "" {
		return nil
	}
	if flagSet(fs.Visit, "name") {
		return usageErrorf("%s: give --provider or --name, not both", fs.Name())
	}
	if msg := payments.CheckProvider(prov); msg != "" {
		return usageErrorf("%s: --provider %q: %s", fs.Name(), prov, msg)
	}
	*name = providerLimiter(prov)
	return nil
}
