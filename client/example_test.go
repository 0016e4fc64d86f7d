package client_test

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"

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
