package interop_test

import (
	"encoding/json"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
)

// gatewayUpto is what serve builds for network.schemes with upto: the
// in-process facilitator's signer settles, for at least the minimum charge.
func gatewayUpto(t *testing.T, cfg *config.Config, settler common.Address) *gateway.Upto {
	t.Helper()
	if !cfg.Network.Offers(config.SchemeUpto) {
		return nil
	}
	minCharge, err := cfg.Network.Upto.MinChargeAmount()
	if err != nil {
		t.Fatal(err)
	}
	u, err := gateway.NewUpto(settler, minCharge, cfg.Network.Upto.Streaming == config.UptoExactOnly)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// uptoCost is the part of x_llm4agents an upto payment adds.
type uptoCost struct {
	Charged     string `json:"charged"`
	Maximum     string `json:"maximum"`
	Transaction string `json:"transaction"`
}

// TestOpenAINodeClientUpto: the official openai npm client, paying with
// @x402/fetch and the official upto client (UptoEvmScheme), buys a
// completion and a stream, and a Responses API call streamed and not, from
// our gateway on anvil; each is quoted its
// maximum and settles what its usage cost, and the payTo receives exactly
// the sum of those charges.
func TestOpenAINodeClientUpto(t *testing.T) {
	requireTools(t)
	requireNPMPackage(t, "openai")
	c := newChain(t)
	gw := startGatewayWith(t, c, true)
	c.approvePermit2(t, payerIdx)
	payTo := testchain.DevAddress(payToIdx)
	before := c.balance(t, payTo)

	out := runNodeScript(t, "openai-client.mjs", nil,
		"BASE_URL="+gw.URL+"/v1",
		"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
		"TOKEN="+c.token.Hex(),
		"NETWORK="+network,
		"MODEL="+sdkModel,
		"SCHEME=upto",
	)
	var got struct {
		NonStreaming, Streaming, Responses, ResponsesStreaming json.RawMessage
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("openai-client.mjs output %q: %v", out, err)
	}
	total := new(big.Int)
	for name, raw := range map[string]json.RawMessage{
		"non-streaming": got.NonStreaming, "streaming": got.Streaming,
		"responses": got.Responses, "responses streaming": got.ResponsesStreaming,
	} {
		var r struct {
			Status          int                  `json:"status"`
			Content         string               `json:"content"`
			Cost            *uptoCost            `json:"cost"`
			PaymentResponse *x402.SettleResponse `json:"paymentResponse"`
			Wire            []wireExchange       `json:"wire"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Status != 200 || r.Content == "" || r.Cost == nil {
			t.Fatalf("%s: status %d, content %q, cost %+v; wire %+v", name, r.Status, r.Content, r.Cost, r.Wire)
		}
		charged, ok1 := new(big.Int).SetString(r.Cost.Charged, 10)
		maxAmount, ok2 := new(big.Int).SetString(r.Cost.Maximum, 10)
		if !ok1 || !ok2 || charged.Sign() <= 0 || charged.Cmp(maxAmount) >= 0 || r.Cost.Transaction == "" {
			t.Errorf("%s: x_llm4agents %+v, want a charge below its maximum, with a transaction", name, r.Cost)
			continue
		}
		if len(r.Wire) != 2 || r.Wire[0].Status != 402 || !r.Wire[1].Paid || r.Wire[0].Quote != r.Cost.Maximum {
			t.Errorf("%s: wire %+v, want one 402 quoting the maximum %s, then one paid request", name, r.Wire, r.Cost.Maximum)
		}
		// A non-streaming answer carries the settlement in PAYMENT-RESPONSE;
		// a stream, delivered before it settles, in its last chunk alone.
		if (name == "non-streaming" || name == "responses") && (r.PaymentResponse == nil || !r.PaymentResponse.Success || r.PaymentResponse.Amount != r.Cost.Charged) {
			t.Errorf("%s: PAYMENT-RESPONSE %+v, want success for %s", name, r.PaymentResponse, r.Cost.Charged)
		}
		total.Add(total, charged)
	}
	if got := new(big.Int).Sub(c.balance(t, payTo), before); got.Cmp(total) != 0 {
		t.Fatalf("payTo received %s, the answers say %s", got, total)
	}
}
