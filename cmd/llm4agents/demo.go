package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/devchain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Roles of the dev accounts in the demo.
const (
	demoBuyer       = 1
	demoFacilitator = 8
	demoPayTo       = 9
)

// runDemo runs everything on embedded defaults: a local chain with a USDC-like
// token, our facilitator over HTTP, and a buyer that pays 0.01 USDC exactly once.
func runDemo(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	verbose := fs.Bool("v", false, "log what the facilitator does")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	}
	logOut := io.Discard
	if *verbose {
		logOut = e.stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	out := e.stdout

	fmt.Fprintln(out, "llm4agents demo: everything below runs on this machine; no real money moves.")
	c, err := devchain.Start(ctx, 50*time.Millisecond, log)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(out, "1. started a local chain (%s) and deployed a test USDC (EIP-3009) at %s\n", devchain.Network, c.Token.Hex())

	buyer := devchain.Address(demoBuyer)
	if err := c.Mint(ctx, buyer, big.NewInt(10_000_000)); err != nil {
		return err
	}
	fmt.Fprintf(out, "2. gave the buyer %s 10.00 USDC\n", buyer.Hex())

	dir, err := os.MkdirTemp("", "llm4agents-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "demo.db"), log)
	if err != nil {
		return err
	}
	defer db.Close()
	sender, err := chain.NewSender(c.Client, devchain.Key(demoFacilitator), c.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 20 * time.Millisecond}, log)
	if err != nil {
		return err
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: devchain.Network,
		Assets:  []facilitator.Asset{{Address: c.Token, Name: devchain.TokenName, Version: devchain.TokenVersion}},
	}, c.Client, sender, db, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	srvDone := make(chan error, 1)
	go func() { srvDone <- serve(srvCtx, ln, facilitator.NewHandler(fac, log), 5*time.Second) }()
	defer func() { stopSrv(); <-srvDone }()
	remote := facilitator.NewClient("http://"+ln.Addr().String(), nil)
	fmt.Fprintf(out, "3. our facilitator is serving on http://%s (signer %s)\n", ln.Addr(), sender.Address().Hex())

	payTo := devchain.Address(demoPayTo)
	pr := &x402.PaymentRequired{
		X402Version: x402.Version,
		Error:       "Payment required",
		Resource:    &x402.ResourceInfo{URL: "http://127.0.0.1/v1/chat/completions", Description: "one chat completion", MimeType: "application/json"},
		Accepts: []x402.PaymentRequirements{{
			Scheme: exact.Scheme, Network: devchain.Network, Amount: "10000", Asset: c.Token.Hex(), PayTo: payTo.Hex(),
			MaxTimeoutSeconds: 300, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
		}},
	}
	header, err := x402.EncodeHeader(pr)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "4. the seller asks for 0.01 USDC: PAYMENT-REQUIRED is %d bytes of base64 JSON\n", len(header))

	decoded, err := x402.DecodePaymentRequired(header)
	if err != nil {
		return err
	}
	payload, err := exact.NewPaymentPayload(ctx, exact.NewKeySigner(devchain.Key(demoBuyer)), decoded, 0, exact.SignOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "5. the buyer signed an EIP-3009 authorization for exactly that amount")

	req := pr.Accepts[0]
	v, err := remote.Verify(ctx, payload, req)
	if err != nil {
		return err
	}
	if !v.IsValid {
		return fmt.Errorf("verify refused the payment: %s %s", v.InvalidReason, v.InvalidMessage)
	}
	fmt.Fprintf(out, "6. /verify: valid, payer %s\n", v.Payer)

	before, err := c.BalanceOf(ctx, payTo)
	if err != nil {
		return err
	}
	s, err := remote.Settle(ctx, payload, req)
	if err != nil {
		return err
	}
	if !s.Success {
		return fmt.Errorf("settle failed: %s %s", s.ErrorReason, s.ErrorMessage)
	}
	after, err := c.BalanceOf(ctx, payTo)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "7. /settle: success, transaction %s; the seller received %s USDC\n", s.Transaction, usdc(new(big.Int).Sub(after, before)))

	again, err := remote.Settle(ctx, payload, req)
	if err != nil {
		return err
	}
	if again.Success {
		return errors.New("the same authorization settled twice")
	}
	fmt.Fprintf(out, "8. the same payment presented again: refused (%s), nothing charged twice\n", again.ErrorReason)
	fmt.Fprintln(out, "done.")
	return nil
}

// usdc formats atomic units of a 6-decimal token.
func usdc(n *big.Int) string {
	q, r := new(big.Int).QuoRem(n, big.NewInt(1_000_000), new(big.Int))
	return fmt.Sprintf("%s.%06s", q, r.String())
}
