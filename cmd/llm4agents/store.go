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

// purgeExpired deletes expired payment claims every period, in batches, until
// stop is called. A backend whose records expire by themselves (Redis) purges
// nothing here, cheaply.
func purgeExpired(db backend, every time.Duration, log *slog.Logger) (stop func()) {
	const batch = 500
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
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				n, err := db.PurgeExpiredPayments(ctx, batch)
				if r, ok := db.(recoveryPurger); ok && err == nil {
					var m int
					m, err = r.PurgeExpiredRecoveries(ctx, batch)
					n = max(n, m)
				}
				cancel()
				if err != nil {
					log.Warn("purge expired payments", "err", err)
				}
				if err != nil || n < batch {
					break
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
