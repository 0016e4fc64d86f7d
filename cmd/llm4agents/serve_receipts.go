package main

import (
	"fmt"
	"log/slog"

	"github.com/ethereum/go-ethereum"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
)

// receiptStore is what receipts need from the store without credits: the
// receipts, and the nonces and sessions of the wallet sign-in their payers
// read them with.
type receiptStore interface {
	store.Receipts
	store.SignIns
}

// receiptSigning returns the receipt signer and the sign-in of a validated
// config, on the store st. With a node of the network (chain not nil),
// contract wallets sign in too (EIP-1271).
func receiptSigning(cfg *config.Config, st store.SignIns, chain ethereum.ContractCaller, getenv func(string) string, log *slog.Logger) (*credits.Signer, *credits.Auth, error) {
	hexKey, err := cfg.ReceiptKey(getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("receipt key: %w", err)
	}
	key, err := parseKey(hexKey, "receipt")
	if err != nil {
		return nil, nil, err
	}
	receiptChain, err := cfg.ReceiptChainID()
	if err != nil {
		return nil, nil, err
	}
	signer, err := credits.NewSigner(key, receiptChain)
	if err != nil {
		return nil, nil, err
	}
	network, err := cfg.Network.ChainID()
	if err != nil {
		return nil, nil, err
	}
	// Sign-in messages name the chain the wallets pay on.
	auth, err := credits.NewAuth(st, cfg.SignInOrigin(), network.Uint64(), log)
	if err != nil {
		return nil, nil, err
	}
	if chain != nil {
		auth.Contracts = credits.NewEIP1271(chain)
	}
	return signer, auth, nil
}

// buildReceipts wires the receipts of a gateway that sells no credits
// (receipts.enabled): x402 payments get signed receipts, kept in db, which
// their payers read after a wallet sign-in. The gateway serves the sign-in
// routes and the receipt routes, not the credit ones; contract wallets sign
// in through chain, if not nil. It returns them and the stop of the sweep
// of expired sign-ins.
func buildReceipts(cfg *config.Config, db backend, chain ethereum.ContractCaller, getenv func(string) string, log *slog.Logger) (_ *gateway.Credits, stop func(), err error) {
	rs, ok := db.(receiptStore)
	if !ok {
		kind, _, _ := cfg.Store.StoreDSN(getenv)
		return nil, nil, fmt.Errorf("receipts: the %s store does not keep receipts and sign-in sessions", kind)
	}
	signer, auth, err := receiptSigning(cfg, rs, chain, getenv, log)
	if err != nil {
		return nil, nil, fmt.Errorf("receipts: %w", err)
	}
	log.Info("receipts on", "receipt_signer", signer.Address().Hex(), "sign_in_origin", auth.Origin())
	sweeper := gateway.StartSignInSweeper(rs, creditSweepEvery, log)
	return &gateway.Credits{Auth: auth, Account: credits.NewSignInHandler(auth, log), Signer: signer, Receipts: rs}, sweeper.Close, nil
}
