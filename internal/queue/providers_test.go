package queue

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
)

func TestClaimProvidersTakesOnlyTheirMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	run := uuid.New()
	ms := messages(run, "nightly-2026-10-24", 0, 10)
	for i := range ms {
		ms[i].Provider = []string{"", "cards", "wallet"}[i%3]
	}
	mustPublish(t, b.q, b.pool, ms)

	ds, err := b.q.ClaimProviders(ctx, 100, []string{"wallet"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.TransactionID+"/"+d.Provider)
	}
	if want := []string{"tx000002/wallet", "tx000005/wallet", "tx000008/wallet"}; !slices.Equal(got, want) {
		t.Errorf("wallet claimed %v, want %v", got, want)
	}
	// The default provider's lane: its name first, then the unnamed, up
	// to n.
	ds, err = b.q.ClaimProviders(ctx, 5, []string{"cards", ""})
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, d := range ds {
		got = append(got, d.TransactionID+"/"+d.Provider)
	}
	if want := []string{"tx000001/cards", "tx000004/cards", "tx000007/cards", "tx000000/", "tx000003/"}; !slices.Equal(got, want) {
		t.Errorf("cards and unnamed claimed %v, want %v", got, want)
	}
	counts, err := b.q.ReadyByProvider(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[""] != 4 || counts["cards"] != 3 || counts["wallet"] != 3 {
		t.Errorf("ready by provider: %v", counts)
	}
}
