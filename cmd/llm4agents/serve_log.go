package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
)

// buildLog wires the receipt log (D30) from a validated config on the opened
// store db, as replica holder. It returns the log and the stop of its
// integrator, which gives the lease back.
func buildLog(cfg *config.Config, db backend, holder string, getenv func(string) string, log *slog.Logger) (*receiptlog.Log, func(), error) {
	st, ok := db.(receiptlog.Store)
	if !ok {
		kind, _, _ := cfg.Store.StoreDSN(getenv)
		return nil, nil, fmt.Errorf("log: the %s store does not hold the receipt log; use sqlite:// or postgres://", kind)
	}
	key, vkey, err := cfg.LogKey(getenv)
	if err != nil {
		return nil, nil, err
	}
	l, err := receiptlog.New(receiptlog.Config{Store: st, Key: key, VerifierKey: vkey, Holder: holder,
		MaxMergeDelay: cfg.Log.MaxMergeDelay, Log: log})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(ctx) })
	return l, func() { cancel(); wg.Wait() }, nil
}
