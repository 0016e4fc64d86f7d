package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
)

// creditStore is what prepaid credits need from the store: the ledger, API
// keys and sessions, and receipts. SQLite and PostgreSQL hold them; Redis
// does not.
type creditStore interface {
	store.Ledger
	store.Leases
	store.Keys
	store.Rates
	store.Receipts
}

// creditSweepEvery is how often settled top-ups are credited and expired
// holds and sign-in records swept.
const creditSweepEvery = time.Minute

// buildCredits wires prepaid credits from a validated config on the opened
// store db, reading top-up settlements from chain. It returns them, their
// top-up sweep (the purge of expired claims waits for it, gateway.PurgeGate)
// and the stop of their sweeper (gateway.StartCreditSweeper).
func buildCredits(cfg *config.Config, db backend, chain gateway.ChainReader, getenv func(string) string, log *slog.Logger) (_ *gateway.Credits, _ *gateway.TopUpSweep, stop func(), err error) {
	cs, ok := db.(creditStore)
	if !ok {
		kind, _, _ := cfg.Store.StoreDSN(getenv)
		return nil, nil, nil, fmt.Errorf("credits: the %s store does not hold the credits ledger, API keys and receipts; use sqlite:// or postgres://", kind)
	}
	if chain == nil {
		return nil, nil, nil, errors.New("credits: no node to read top-up settlements from (set network.rpc_url)")
	}
	signer, auth, err := receiptSigning(cfg, cs, chain, getenv, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("credits: %w", err)
	}
	asset, err := cfg.Network.AssetAddress()
	if err != nil {
		return nil, nil, nil, err
	}
	led, err := ledger.New(cs, ledger.Config{Asset: ledger.AssetID(cfg.Network.ID, asset), HoldTTL: cfg.Credits.HoldTTL}, log)
	if err != nil {
		return nil, nil, nil, err
	}
	lo, hi, err := cfg.Credits.TopUpBounds()
	if err != nil {
		return nil, nil, nil, err
	}
	keys := credits.NewKeys(cs, log)
	keys.CacheTTL = cfg.Credits.KeyCacheTTL()
	account := credits.NewHandler(auth, cs, log)
	account.KeyChanged = keys.Forget
	c := &gateway.Credits{
		Ledger: led, Keys: keys, Auth: auth, Account: account,
		Signer: signer, Receipts: cs, TopUpMin: lo, TopUpMax: hi, Chain: chain, Confirmations: cfg.Credits.Confirmations,
	}
	stopLeases := func() {}
	if cfg.Credits.Durability == config.DurabilityLeased {
		if c.Leases, stopLeases, err = startLeases(cfg, led, cs, log); err != nil {
			return nil, nil, nil, err
		}
	}
	// The sweep reads the payment terms the gateway is built with
	// (buildGateway); db lists staged claims, as every credit store does.
	topUps, err := gateway.NewTopUpSweep(gateway.TopUpSweepConfig{
		Network: cfg.Network.ID, Asset: asset.Hex(), PayTo: cfg.Network.PayTo, Credits: c, Payments: db,
	}, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("credits: %w", err)
	}
	stopWatch := func() {}
	if w, ok := db.(keyWatcher); ok && keys.CacheTTL > 0 {
		stopWatch = watchKeys(w, keys, log)
	}
	log.Info("credits on", "receipt_signer", signer.Address().Hex(), "sign_in_origin", auth.Origin(),
		"topup_min", lo.String(), "topup_max", hi.String(), "durability", cfg.Credits.Durability)
	sweeper := gateway.StartCreditSweeper(topUps, led, cs, creditSweepEvery, log)
	return c, topUps, func() { stopLeases(); sweeper.Close(); stopWatch() }, nil
}

// keyWatcher is a store that tells of the API keys changed: PostgreSQL
// through any replica, SQLite through this process.
type keyWatcher interface {
	WatchKeys(ctx context.Context, changed func(hash string), lost func()) error
}

// watchKeys drops each key w tells of from the key cache of keys (every
// key when notifications were lost), so that a change made through another
// replica binds as soon as it is told instead of when the cache's TTL ends,
// and returns the stop of the watch, which waits for it to return.
func watchKeys(w keyWatcher, keys *credits.Keys, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.WatchKeys(ctx, keys.Forget, keys.ForgetAll); err != nil {
			log.Warn("key changes no longer watched; cached keys bind within their TTL", "err", err)
		}
	}()
	log.Info("key changes watched: a key changed elsewhere leaves the key cache when the store tells of it", "key_cache", keys.CacheTTL.String())
	return func() {
		cancel()
		<-done
	}
}

// leaseCloseTimeout bounds the wait at shutdown for the calls still drawing
// on this replica's leases, and the last writes of their draws.
const leaseCloseTimeout = 30 * time.Second

// startLeases starts this replica's credit leases (credits.durability:
// leased) and returns them with their stop, which writes every draw and
// closes every lease; run it once the server has stopped taking calls.
func startLeases(cfg *config.Config, led *ledger.Ledger, cs creditStore, log *slog.Logger) (*ledger.Leases, func(), error) {
	maxSize, err := cfg.Credits.LeaseMaxAmount()
	if err != nil {
		return nil, nil, err
	}
	ls, err := led.NewLeases(cs, ledger.LeaseConfig{
		Replica: "r", FlushInterval: cfg.Credits.FlushInterval, Window: cfg.Credits.LeaseWindow,
		// A call admitted at the end of the window runs to its end and
		// draws after it: the hold TTL already covers the longest call.
		TTL: cfg.Credits.LeaseWindow + cfg.Credits.HoldTTL, MaxSize: maxSize,
	}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("credits: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ls.Run(ctx)
	}()
	return ls, func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), leaseCloseTimeout)
		defer ccancel()
		if err := ls.Close(cctx); err != nil {
			log.Error("close credit leases; what was not written is free, the rest returns at the leases' TTL", "err", err)
		}
	}, nil
}
