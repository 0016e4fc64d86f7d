package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// backend is what the binary needs from a store: every contract, and the
// housekeeping each backend provides.
type backend interface {
	store.Settlements
	store.Payments
	PurgeExpiredPayments(ctx context.Context, limit int) (int, error)
	Ping(ctx context.Context) error
	Close() error
}

// recoveryPurger is the housekeeping of a backend that keeps paid answers
// for replay (store.Recoveries).
type recoveryPurger interface {
	PurgeExpiredRecoveries(ctx context.Context, limit int) (int, error)
}

// openStore opens the store a config names. The backend is chosen by a plain
// switch on the DSN's scheme; errors never repeat the DSN (it may carry a
// password).
func openStore(ctx context.Context, s config.Store, getenv func(string) string, log *slog.Logger) (backend, error) {
	kind, dsn, err := s.StoreDSN(getenv)
	if err != nil {
		return nil, err
	}
	var db backend
	switch kind {
	case config.StoreSQLite:
		path, _ := config.Store{DSN: dsn}.SQLitePath()
		db, err = sqlite.Open(ctx, path, log)
	case config.StorePostgres:
		db, err = postgres.Open(ctx, dsn, log)
	case config.StoreRedis:
		db, err = redis.Open(ctx, dsn, log)
	default:
		err = fmt.Errorf("store backend %q is not built in", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("store (%s): %w", kind, err)
	}
	return db, nil
}

// purgeGate says whether expired payment claims may be purged: the top-up
// sweep (gateway.TopUpSweep.SweepBeforePurge) sweeps and returns how many
// expired claims it left waiting for their credit. Once expired, a top-up's
// claim is credited by the sweep alone; purging it first would lose a paid
// top-up.
type purgeGate interface {
	SweepBeforePurge(ctx context.Context) (waiting int, err error)
}

// purgeGateTimeout bounds the sweep a purge waits for: longer than a minute
// sweep, as it may read many claims from the chain.
const purgeGateTimeout = 5 * time.Minute

// purgeExpired deletes expired payment claims and recoveries every period,
// in batches, until stop is called. With a gate (credits on), a round purges
// payment claims only after a sweep of the gate that left no expired claim
// waiting and failed nowhere; otherwise it keeps them all, purges the rest,
// and logs a warning. A backend whose records expire by themselves (Redis)
// purges nothing here, cheaply.
func purgeExpired(db backend, gate purgeGate, every time.Duration, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			purgeRound(db, gate, log)
		}
	})
	return func() { close(done); wg.Wait() }
}

// purgeRound is one round of purgeExpired.
func purgeRound(db backend, gate purgeGate, log *slog.Logger) {
	const batch = 500
	payments := true
	if gate != nil {
		ctx, cancel := context.WithTimeout(context.Background(), purgeGateTimeout)
		waiting, err := gate.SweepBeforePurge(ctx)
		cancel()
		if err != nil || waiting > 0 {
			payments = false
			log.Warn("kept expired payment claims: top-ups may still be waiting for their credit", "waiting", waiting, "err", err)
		}
	}
	if payments {
		purgeBatches(batch, "purge expired payments", log, db.PurgeExpiredPayments)
	}
	if r, ok := db.(recoveryPurger); ok {
		purgeBatches(batch, "purge expired recoveries", log, r.PurgeExpiredRecoveries)
	}
}

// purgeBatches calls purge with batch until it deletes fewer or fails.
func purgeBatches(batch int, what string, log *slog.Logger, purge func(ctx context.Context, limit int) (int, error)) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := purge(ctx, batch)
		cancel()
		if err != nil {
			log.Warn(what, "err", err)
		}
		if err != nil || n < batch {
			return
		}
	}
}
