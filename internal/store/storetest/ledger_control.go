package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Key cap race, for the read-then-write control (readthenwrite_on.go in the
// sqlite and postgres packages).
const (
	// CapRaceHolds is how many holds KeyCapRace places at once.
	CapRaceHolds = 200
	// CapRaceCap is the key's total cap in KeyCapRace: $1.00.
	CapRaceCap = dollar
	// CapRaceAmount is each hold's amount: a cent.
	CapRaceAmount = dollar / 100
	// CapRaceFits is how many holds fit within the cap.
	CapRaceFits = int(CapRaceCap / CapRaceAmount)
	// CapRaceKey is the id of the key KeyCapRace holds through.
	CapRaceKey = "sk-race"
)

// KeyCapRace places CapRaceHolds holds of CapRaceAmount at once, alternately
// through a and b (two handles on one database, as two replicas), from one
// owner funded with $100 through one key whose total cap is CapRaceCap. It
// returns how many holds were placed and the key's held amount as b reads it
// afterwards, which it checks against the holds placed; every refusal must be
// on the key's total cap. It does not judge the result: a test of the guard
// wants held <= CapRaceCap, a control run with the guard switched off wants
// held > CapRaceCap.
func KeyCapRace(t *testing.T, a, b store.Ledger) (placed int, held int64) {
	t.Helper()
	ctx := t.Context()
	if _, err := a.Credit(ctx, "race-topup", alice, usdc, 100*dollar); err != nil {
		t.Fatalf("Credit(): %v", err)
	}
	key := store.KeyLimits{ID: CapRaceKey, TotalCap: CapRaceCap, PeriodCap: store.NoCap}
	startGun := make(chan struct{})
	errs := make(chan error, CapRaceHolds)
	var wg sync.WaitGroup
	for i := range CapRaceHolds {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Go(func() {
			<-startGun
			_, err := h.Hold(ctx, store.HoldRequest{ID: fmt.Sprintf("race-%d", i), Owner: alice, Asset: usdc,
				Amount: CapRaceAmount, TTL: ttl, Key: &key})
			errs <- err
		})
	}
	close(startGun)
	wg.Wait()
	close(errs)
	for err := range errs {
		var ie *store.InsufficientError
		switch {
		case err == nil:
			placed++
		case errors.As(err, &ie) && ie.Limit == store.LimitKeyTotal:
		default:
			t.Errorf("hold: %v, want nil or an InsufficientError on %s", err, store.LimitKeyTotal)
		}
	}
	u, err := b.KeyUsage(ctx, CapRaceKey, usdc, 0)
	if err != nil {
		t.Fatalf("KeyUsage(): %v", err)
	}
	if want := int64(placed) * CapRaceAmount; u.Held != want || u.Spent != 0 {
		t.Errorf("key usage %+v after %d holds placed, want %d held", u, placed, want)
	}
	t.Logf("%d of %d holds placed, %d held against a cap of %d", placed, CapRaceHolds, u.Held, CapRaceCap)
	return placed, u.Held
}
