package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/dashboard"
	"github.com/llm4agents/llm4agents/internal/devchain"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
)

// buildDashboard returns the handler of /dashboard, or nil when
// dashboard.enabled is false. It reads what the gateway already keeps: the
// sign-in, keys, ledger and receipts of cred, the settlements of the
// in-process facilitator (settlements nil otherwise), the metrics and the
// receipt log (nil when off).
func buildDashboard(cfg *config.Config, cred *gateway.Credits, settlements store.Settlements, metrics *gateway.Metrics,
	rl *receiptlog.Log, log *slog.Logger) (http.Handler, error) {
	if !cfg.Dashboard.On() {
		return nil, nil
	}
	if cred == nil || cred.Auth == nil {
		return dashboard.Unavailable("The dashboard signs you in with your wallet, and this gateway has no wallet sign-in: " +
			"its operator turns it on with receipts.enabled (or credits.enabled) in its config."), nil
	}
	chainID, err := cfg.Network.ChainID()
	if err != nil {
		return nil, err
	}
	asset, _ := cfg.Network.AssetAddress()
	dc := dashboard.Config{
		Origin: cred.Auth.Origin(), ChainID: chainID.Uint64(), Sessions: cred.Auth, Receipts: cred.Receipts,
		Admins: cfg.AdminAddresses(), Asset: asset, Metrics: metrics.Registry(),
		AssetSymbol: "USDC", Decimals: cfg.Network.Decimals, Network: cfg.Network.ID, TxURL: cfg.Dashboard.TxURL, Log: log,
	}
	if settlements != nil {
		dc.Settlements = settlements
	}
	if all, ok := cred.Receipts.(store.RecentReceipts); ok {
		dc.AllReceipts = all
	}
	if cred.Ledger != nil {
		if h, ok := cred.Account.(*credits.Handler); ok {
			dc.Keys = h
		}
		dc.Balances = cred.Ledger
		dc.KeyUsage = func(ctx context.Context, k store.APIKey) (store.KeyUsage, error) {
			return cred.Ledger.KeyUsage(ctx, *ledger.KeyOf(k))
		}
		if ls := cred.Leases; ls != nil {
			dc.Balances = ls
			dc.Receipts = flushedReceipts{cred.Receipts, ls}
			// Leased calls' spend is in this replica's leases until flushed.
			dc.KeyUsage = func(ctx context.Context, k store.APIKey) (store.KeyUsage, error) {
				return ls.KeyUsage(ctx, common.HexToAddress(k.Owner), *ledger.KeyOf(k))
			}
		}
	}
	if cred.Signer != nil {
		if rl != nil {
			dc.Verify = dashboard.NewVerifier(cred.Signer.Address(), cred.Signer.Domain(), rl, rl.Verifier())
			dc.ReceiptLog = rl
		} else {
			dc.Verify = dashboard.NewVerifier(cred.Signer.Address(), cred.Signer.Domain(), nil, nil)
		}
	}
	if cfg.IsDemo() {
		// The demo's wallets are public dev keys of its in-process chain:
		// its dashboard signs in as them without a browser wallet.
		dc.DemoAccounts = []dashboard.DemoAccount{
			{Label: "the demo buyer", Key: devchain.Key(demoBuyer)},
			{Label: "the demo operator (pay_to)", Key: devchain.Key(demoPayTo)},
		}
	}
	return dashboard.New(dc)
}

// flushedReceipts lists receipts after writing this replica's leased
// calls' draws, as GET /v1/receipts does: a call the buyer just made is on
// the page they open next.
type flushedReceipts struct {
	store.Receipts
	leases *ledger.Leases
}

func (f flushedReceipts) ReceiptsOf(ctx context.Context, q store.ReceiptsQuery) ([]store.StoredReceipt, error) {
	f.leases.Flush(ctx)
	return f.Receipts.ReceiptsOf(ctx, q)
}
