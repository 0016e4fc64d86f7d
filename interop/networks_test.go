package interop_test

import (
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// secondChainID is the chain id of a second anvil node, another network
// than the primary's.
const secondChainID = 31337

// paymentNetwork is c offered as a further way to pay: its token, settled by
// an in-process facilitator of its own with key on c's node.
func (c *testChain) paymentNetwork(t *testing.T, key *ecdsa.PrivateKey, db store.Settlements, log *slog.Logger) gateway.PaymentNetwork {
	t.Helper()
	net := fmt.Sprintf("eip155:%d", c.anvil.ChainID)
	sender, err := chain.NewSender(c.anvil.Client, key, c.anvil.ChainID, chain.SenderConfig{MaxFeePerGas: big.NewInt(200_000_000_000), PollInterval: 200 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: net, SettleTimeout: 30 * time.Second,
		Assets:  []facilitator.Asset{{Address: c.token, Name: tokenName, Version: tokenVersion}},
		Schemes: []string{exact.Scheme},
	}, c.anvil.Client, sender, db, log)
	if err != nil {
		t.Fatal(err)
	}
	rec := fac.StartReconciler(30 * time.Second)
	t.Cleanup(rec.Close)
	return gateway.PaymentNetwork{
		Network: net, Asset: c.token.Hex(), AssetName: tokenName, AssetVersion: tokenVersion,
		PayTo: testchain.DevAddress(payToIdx).Hex(), Facilitator: fac,
	}
}

// TestOpenAINodeClientSecondNetwork: the official openai client with
// @x402/fetch, registered for the second network only, pays a gateway whose
// 402 offers two chains on the second one, one transfer per call, and
// nothing moves on the first.
func TestOpenAINodeClientSecondNetwork(t *testing.T) {
	requireTools(t)
	requireNPMPackage(t, "openai")
	first := newChain(t)
	second := newChain(t, testchain.WithChainID(secondChainID))
	gw := startGatewayWith(t, first, false, second)
	markFirst := first.mark(t, gw.Facilitator)
	markSecond := second.mark(t, gw.Facilitator)
	secondNet := fmt.Sprintf("eip155:%d", secondChainID)

	out := runNodeScript(t, "openai-client.mjs", nil,
		"BASE_URL="+gw.URL+"/v1",
		"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
		"TOKEN="+second.token.Hex(),
		"NETWORK="+secondNet,
		"MODEL="+sdkModel,
	)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("openai-client.mjs output:\n%s", out)
		}
	})
	var got struct {
		NonStreaming callResult `json:"nonStreaming"`
		Streaming    callResult `json:"streaming"`
		Responses    callResult `json:"responses"`
		ResponsesSSE callResult `json:"responsesStreaming"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("openai-client.mjs output %q: %v", out, err)
	}
	var paid []paidCall
	t.Run("non-streaming", func(t *testing.T) {
		paid = append(paid, checkPaidCallOn(t, secondNet, "/v1/chat/completions", got.NonStreaming, quoteModelCap, sdkModelCap, false))
	})
	t.Run("streaming", func(t *testing.T) {
		paid = append(paid, checkPaidCallOn(t, secondNet, "/v1/chat/completions", got.Streaming, quoteMaxTokens64, 64, true))
	})
	t.Run("responses", func(t *testing.T) {
		paid = append(paid, checkPaidCallOn(t, secondNet, "/v1/responses", got.Responses, quoteMaxTokens64, 64, false))
	})
	t.Run("responses streaming", func(t *testing.T) {
		paid = append(paid, checkPaidCallOn(t, secondNet, "/v1/responses", got.ResponsesSSE, quoteMaxTokens64, 64, true))
	})
	if len(paid) != 4 {
		t.Fatalf("%d of 4 calls paid", len(paid))
	}
	second.checkPaidOnChain(t, markSecond, gw.Facilitator, paid)
	// Nothing moved on the first chain, and its facilitator sent nothing.
	first.checkBalanceRose(t, testchain.DevAddress(payToIdx), markFirst.balance, "0")
	if n, err := first.anvil.Client.NonceAt(t.Context(), gw.Facilitator, nil); err != nil || n != markFirst.facNonce {
		t.Errorf("the facilitator's nonce on the first chain is %d (%v), was %d", n, err, markFirst.facNonce)
	}
}
