package interop_test

import (
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

const (
	// uptoCharge is what is settled of the upto offer's uptoMax (upto_test.go).
	uptoCharge = "1234567"
)

// uptoOfficialResult is what upto-official.mjs prints.
type uptoOfficialResult struct {
	Payload json.RawMessage `json:"payload"`
	Verify  struct {
		IsValid       bool   `json:"isValid"`
		InvalidReason string `json:"invalidReason"`
		Payer         string `json:"payer"`
	} `json:"verify"`
	Settle   x402.SettleResponse `json:"settle"`
	Replay   x402.SettleResponse `json:"replay"`
	ProxyABI json.RawMessage     `json:"proxyABI"`
	Address  struct {
		Permit2   string `json:"permit2"`
		UptoProxy string `json:"uptoProxy"`
	} `json:"addresses"`
}

// TestOfficialUptoOnOurContracts: the official @x402/evm upto client signs a
// Permit2 witness transfer for a maximum, and the official upto facilitator
// verifies it and settles a smaller actual amount through our Permit2 and
// X402UptoPermit2Proxy on anvil. The payee receives exactly the charge, the
// replay is refused, and the ABI and addresses the official package has built
// in are ours.
func TestOfficialUptoOnOurContracts(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	ctx := t.Context()
	payer, payTo, fac := testchain.DevAddress(payerIdx), testchain.DevAddress(payToIdx), testchain.DevAddress(facilitatorIdx)

	// The payer's one-time approval of Permit2, as a wallet would send it.
	c.approvePermit2(t, payerIdx)
	_, prJSON := uptoRequired(t, c, `{"facilitatorAddress":"`+fac.Hex()+`","name":"`+tokenName+`","version":"`+tokenVersion+`"}`)
	payerBefore, payToBefore := c.balance(t, payer), c.balance(t, payTo)
	out := runNodeScript(t, "upto-official.mjs", prJSON,
		"RPC_URL="+c.anvil.URL,
		"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
		"FACILITATOR_KEY="+keyHex(testchain.DevKey(facilitatorIdx)),
		"SETTLE_AMOUNT="+uptoCharge,
	)
	var res uptoOfficialResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("upto-official.mjs output %s: %v", out, err)
	}

	if !res.Verify.IsValid || !strings.EqualFold(res.Verify.Payer, payer.Hex()) {
		t.Fatalf("official verify: %+v, want valid for %s", res.Verify, payer)
	}
	if !res.Settle.Success || res.Settle.Amount != uptoCharge || res.Settle.Transaction == "" {
		t.Fatalf("official settle: %+v, want success for %s", res.Settle, uptoCharge)
	}
	c.checkBalanceRose(t, payTo, payToBefore, uptoCharge)
	if paid := new(big.Int).Sub(payerBefore, c.balance(t, payer)); paid.String() != uptoCharge {
		t.Errorf("payer paid %s, want %s", paid, uptoCharge)
	}
	if res.Replay.Success {
		t.Errorf("official replay: %+v, want a refusal", res.Replay)
	}
	t.Logf("the replay is refused with %q", res.Replay.ErrorReason)

	// The settlement went through our proxy, from the facilitator the payer named.
	receipt, err := c.anvil.Client.TransactionReceipt(ctx, common.HexToHash(res.Settle.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	proxyABI, err := contracts.X402UptoPermit2ProxyMetaData.GetAbi()
	if err != nil {
		t.Fatal(err)
	}
	settled := false
	for _, l := range receipt.Logs {
		settled = settled || (l.Address == contracts.UptoProxyAddress && len(l.Topics) > 0 && l.Topics[0] == proxyABI.Events["Settled"].ID)
	}
	if !settled {
		t.Error("no Settled event from the proxy in the settlement's receipt")
	}
	if from := c.sender(t, receipt.TxHash); from != fac {
		t.Errorf("settled by %s, want the facilitator %s", from, fac)
	}
	nonce := permitNonce(t, res.Payload)
	word, bit := new(big.Int).Rsh(nonce, 8), int(new(big.Int).And(nonce, big.NewInt(0xff)).Int64())
	permit2, err := contracts.NewPermit2(contracts.Permit2Address, c.anvil.Client)
	if err != nil {
		t.Fatal(err)
	}
	if bits, err := permit2.NonceBitmap(&bind.CallOpts{Context: ctx}, payer, word); err != nil || bits.Bit(bit) != 1 {
		t.Errorf("Permit2 nonce word %s of the payer = %v, %v; want bit %d set", word, bits, err, bit)
	}

	// What the official package has built in matches our contracts.
	if res.Address.Permit2 != contracts.Permit2AddressHex || res.Address.UptoProxy != contracts.UptoProxyAddressHex {
		t.Errorf("official addresses %+v, want Permit2 %s and proxy %s", res.Address, contracts.Permit2AddressHex, contracts.UptoProxyAddressHex)
	}
	official, err := abi.JSON(strings.NewReader(string(res.ProxyABI)))
	if err != nil {
		t.Fatalf("official proxy ABI: %v", err)
	}
	if diff := cmp.Diff(abiSignatures(&official), abiSignatures(proxyABI)); diff != "" {
		t.Errorf("proxy ABI (-official +ours):\n%s", diff)
	}
}

// abiSignatures lists every function (with its outputs and mutability), event
// and error of a, sorted: what callers and revert decoders depend on.
func abiSignatures(a *abi.ABI) []string {
	var sigs []string
	for _, m := range a.Methods {
		var outs []string
		for _, o := range m.Outputs {
			outs = append(outs, o.Type.String())
		}
		sigs = append(sigs, "function "+m.Sig+" "+m.StateMutability+" returns ("+strings.Join(outs, ",")+")")
	}
	for _, e := range a.Events {
		sigs = append(sigs, "event "+e.Sig)
	}
	for _, e := range a.Errors {
		sigs = append(sigs, "error "+e.Sig)
	}
	slices.Sort(sigs)
	return sigs
}

// permitNonce reads permit2Authorization.nonce, a decimal string, from a
// PaymentPayload.
func permitNonce(t *testing.T, payload json.RawMessage) *big.Int {
	t.Helper()
	var p struct {
		Payload struct {
			Permit2Authorization struct {
				Nonce string `json:"nonce"`
			} `json:"permit2Authorization"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	n, ok := new(big.Int).SetString(p.Payload.Permit2Authorization.Nonce, 10)
	if !ok {
		t.Fatalf("nonce %q is not a decimal", p.Payload.Permit2Authorization.Nonce)
	}
	return n
}

// TestOfficialFacilitatorSettlesOurUpto: a permit our Go signer made
// (upto.NewPaymentPayload) is verified for its maximum and settled for a
// smaller charge by the official upto facilitator, through our contracts on
// anvil; a second settle is refused.
func TestOfficialFacilitatorSettlesOurUpto(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	ctx := t.Context()
	payer, payTo, fac := testchain.DevAddress(payerIdx), testchain.DevAddress(payToIdx), testchain.DevAddress(facilitatorIdx)
	c.approvePermit2(t, payerIdx)
	pr, prJSON := uptoRequired(t, c, `{"facilitatorAddress":"`+fac.Hex()+`"}`)
	ours, err := upto.NewPaymentPayload(ctx, exact.NewKeySigner(testchain.DevKey(payerIdx)), pr, 0, upto.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := x402.Marshal(ours)
	if err != nil {
		t.Fatal(err)
	}
	payerBefore, payToBefore := c.balance(t, payer), c.balance(t, payTo)
	out := runNodeScript(t, "upto-official.mjs", prJSON,
		"RPC_URL="+c.anvil.URL,
		"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
		"FACILITATOR_KEY="+keyHex(testchain.DevKey(facilitatorIdx)),
		"SETTLE_AMOUNT="+uptoCharge,
		"PAYLOAD="+string(payload),
	)
	var res uptoOfficialResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("upto-official.mjs output %s: %v", out, err)
	}
	if !res.Verify.IsValid || !strings.EqualFold(res.Verify.Payer, payer.Hex()) {
		t.Fatalf("official verify of our permit: %+v, want valid for %s", res.Verify, payer)
	}
	if !res.Settle.Success || res.Settle.Amount != uptoCharge || res.Settle.Transaction == "" {
		t.Fatalf("official settle of our permit: %+v, want success for %s", res.Settle, uptoCharge)
	}
	c.checkBalanceRose(t, payTo, payToBefore, uptoCharge)
	if paid := new(big.Int).Sub(payerBefore, c.balance(t, payer)); paid.String() != uptoCharge {
		t.Errorf("payer paid %s, want %s", paid, uptoCharge)
	}
	if res.Replay.Success {
		t.Errorf("official replay of our permit: %+v, want a refusal", res.Replay)
	}
}

// approvePermit2 sends dev account i's one-time approval of Permit2, as a
// wallet would.
func (c *testChain) approvePermit2(t *testing.T, i int) {
	t.Helper()
	tx, err := c.tokenContract.Approve(transactor(t, t.Context(), c.anvil, i), contracts.Permit2Address, abi.MaxUint256)
	if err != nil {
		t.Fatal(err)
	}
	waitMined(t, t.Context(), c.anvil, tx)
}

// uptoRequired is a 402 offering upto for at most uptoMax of c's token to
// payTo, with extra, and its JSON.
func uptoRequired(t *testing.T, c *testChain, extra string) (*x402.PaymentRequired, []byte) {
	t.Helper()
	pr := &x402.PaymentRequired{
		X402Version: 2, Error: "Payment required",
		Resource: &x402.ResourceInfo{URL: "http://127.0.0.1:4021/metered", Description: "interop upto", MimeType: "application/json"},
		Accepts: []x402.PaymentRequirements{{
			Scheme: "upto", Network: network, Amount: uptoMax, Asset: c.token.Hex(), PayTo: testchain.DevAddress(payToIdx).Hex(),
			MaxTimeoutSeconds: maxTimeoutSeconds, Extra: json.RawMessage(extra),
		}},
	}
	b, err := x402.Marshal(pr)
	if err != nil {
		t.Fatal(err)
	}
	return pr, b
}
