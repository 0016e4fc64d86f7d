package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// backend is what the binary needs from a store: every contract, and the
// housekeeping each backend provides (gateway.StartPurger calls it).
type backend interface {
	store.Settlements
	store.Payments
	PurgeExpiredPayments(ctx context.Context, limit int) (int, error)
	Ping(ctx context.Context) error
	Close() error
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
