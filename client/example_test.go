package client_test

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// A Transport pays within 0.05 USDC per call and 1 USDC in all, on Base. With
// the OpenAI Go SDK, pass the same http.Client with option.WithHTTPClient and
// any placeholder API key.
func ExampleTransport() {
	key, err := crypto.HexToECDSA(os.Getenv("PAYER_KEY")) // never a flag value
	if err != nil {
		fmt.Println("no key:", err)
		return
	}
	tr := &client.Transport{
		Signer: exact.NewKeySigner(key),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(50_000),    // 0.05 USDC
			Budget:        big.NewInt(1_000_000), // 1 USDC
			Assets:        []client.Asset{{Network: "eip155:8453", Address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"}},
		},
	}
	hc := &http.Client{Transport: tr}

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://api.example.com/paid", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Println(err) // a *client.NoPayableOptionError lists each option and why it was refused
		return
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	if sr, err := client.SettleResponse(resp); err == nil {
		fmt.Println("settled in", sr.Transaction)
	}
	fmt.Println("spent", tr.Spent(), "left", tr.Remaining())
}

// A Transport whose payments survive a crash: a retry of the same request by a
// restarted process sends the payment recorded before the crash instead of
// signing a second one. Receipts are checked against the signer the gateway
// publishes.
func ExampleFileJournal() {
	key, err := crypto.HexToECDSA(os.Getenv("PAYER_KEY"))
	if err != nil {
		fmt.Println("no key:", err)
		return
	}
	journal, err := client.NewFileJournal(os.ExpandEnv("$HOME/.llm4agents/journal")) // 0700, files 0600
	if err != nil {
		fmt.Println(err)
		return
	}
	hc := &http.Client{Transport: &client.Transport{
		Signer:  exact.NewKeySigner(key),
		Policy:  client.Policy{MaxPerRequest: big.NewInt(50_000), Budget: big.NewInt(1_000_000), Assets: []client.Asset{{Network: "eip155:8453", Address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"}}},
		Journal: journal,
		Retry:   client.RetryPolicy{MaxAttempts: 5},
	}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://api.example.com/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Idempotency-Key", "order-1234") // optional: else the request's fingerprint names the call
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	var receipts client.ReceiptVerifier
	if r, err := receipts.VerifyResponse(req.Context(), resp); err == nil {
		fmt.Println("charged", r.Amount, "balance", r.BalanceAfter)
	}
}

// A Transport that pays the upto scheme when a server offers it (the default,
// UptoPrefer): it signs a Permit2 transfer of at most the offer's amount, holds
// that maximum against the budget while the call is open, and then counts only
// what the server settled. OnCharge sees both. The wallet must have approved
// Permit2 for the token once (`llm4agents wallet approve-permit2`).
func ExampleTransport_upto() {
	key, err := crypto.HexToECDSA(os.Getenv("PAYER_KEY"))
	if err != nil {
		fmt.Println("no key:", err)
		return
	}
	tr := &client.Transport{
		Signer: exact.NewKeySigner(key),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(50_000),
			Budget:        big.NewInt(1_000_000),
			Assets:        []client.Asset{{Network: "eip155:8453", Address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"}},
			Upto:          client.UptoPrefer, // UptoAsOffered: no preference; UptoRefuse: exact only
		},
		OnCharge: func(_ context.Context, c client.Charge) {
			if c.Err != nil {
				fmt.Println("the server's settlement cannot be right:", c.Err) // counted at the maximum
			}
			fmt.Println(c.Requirements.Scheme, "at most", c.Maximum, "charged", c.Amount)
		},
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://api.example.com/metered", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = resp.Body.Close()
	fmt.Println("spent", tr.Spent())
}
