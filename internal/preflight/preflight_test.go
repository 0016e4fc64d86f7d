package preflight

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
)

// node is the in-process chain of every test, with tokens deployed under
// other EIP-712 domains and signers with little or no ETH.
type node struct {
	s *testchain.Simulated
	// otherVersion is "USD Coin" version "1"; otherName "Other Coin" version
	// "2"; otherBoth "Other Coin" version "1".
	otherVersion, otherName, otherBoth common.Address
	// wallet is a contract that is not a token.
	wallet common.Address
	// broke holds no ETH; poor holds 1 gwei.
	broke, poor common.Address
}

func newNode(tb testing.TB) *node {
	tb.Helper()
	s := testchain.NewSimulated(tb)
	n := &node{s: s, broke: common.HexToAddress("0x00000000000000000000000000000000000b0c3e")}
	deploy := func(name, version string) common.Address {
		addr, tx, _, err := contracts.DeployEIP3009Token(s.Transactor(tb, 0), s.Client, name, version, 6)
		if err != nil {
			tb.Fatal(err)
		}
		if r := s.Mine(tb, tx); r.Status != types.ReceiptStatusSuccessful {
			tb.Fatalf("deploy %s %s failed", name, version)
		}
		return addr
	}
	n.otherVersion = deploy("USD Coin", "1")
	n.otherName = deploy("Other Coin", "2")
	n.otherBoth = deploy("Other Coin", "1")
	n.wallet = s.DeployWallet(tb, s.Addr(0))
	n.poor = common.HexToAddress("0x000000000000000000000000000000000000900f")
	n.send(tb, n.poor, big.NewInt(1_000_000_000))
	return n
}

// send moves wei from dev account 0 to to.
func (n *node) send(tb testing.TB, to common.Address, wei *big.Int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	nonce, err := n.s.Client.PendingNonceAt(ctx, n.s.Addr(0))
	if err != nil {
		tb.Fatal(err)
	}
	head, err := n.s.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tip, err := n.s.Client.SuggestGasTipCap(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tx := types.MustSignNewTx(n.s.Keys[0], types.LatestSignerForChainID(n.s.ChainID), &types.DynamicFeeTx{
		ChainID: n.s.ChainID, Nonce: nonce, GasTipCap: tip, GasFeeCap: new(big.Int).Add(new(big.Int).Lsh(head.BaseFee, 1), tip),
		Gas: 21_000, To: &to, Value: wei,
	})
	if err := n.s.Client.SendTransaction(ctx, tx); err != nil {
		tb.Fatal(err)
	}
	if r := n.s.Mine(tb, tx); r.Status != types.ReceiptStatusSuccessful {
		tb.Fatal("transfer failed")
	}
}

// setup is serve's set-up of the demo: network, token and signer all right.
func (n *node) setup() Setup {
	return Setup{
		Network: "eip155:1337", NetworkKey: "network.id", Node: "chain at test",
		Assets: []Asset{{
			Address: n.s.Token, Name: "USD Coin", Version: "2",
			Key: "network.asset", NameKey: "network.asset_name", VersionKey: "network.asset_version",
		}},
		Signer: n.s.Addr(8), SignerKey: "facilitator.key_env",
	}
}

func TestCheck(t *testing.T) {
	n := newNode(t)
	tests := []struct {
		name  string
		edit  func(s *Setup)
		chain func(c Chain) Chain // wraps the node; nil for the node itself
		// want are the messages, one per problem; none means Check passes.
		want []string
		// warn is in the log when set, and no warning is when empty.
		warn string
	}{
		{name: "all right"},
		{name: "chain id mismatch", edit: func(s *Setup) { s.Network = "eip155:8453" },
			want: []string{"network.id eip155:8453 does not match the node's chain id 1337 (chain at test)"}},
		{name: "asset without code", edit: func(s *Setup) { s.Assets[0].Address = n.s.Addr(5) },
			want: []string{"network.asset " + n.s.Addr(5).Hex() + " has no contract code on eip155:1337 (chain at test)"}},
		{name: "asset not a token", edit: func(s *Setup) { s.Assets[0].Address = n.wallet },
			want: []string{"network.asset " + n.wallet.Hex() + " answers none of eip712Domain(), DOMAIN_SEPARATOR(), name() and version(): it is not an EIP-3009 token"}},
		{name: "token of another version", edit: func(s *Setup) { s.Assets[0].Address = n.otherVersion },
			want: []string{`network.asset_version is "2" but the token's EIP-712 domain says "1"`}},
		{name: "token of another name", edit: func(s *Setup) { s.Assets[0].Address = n.otherName },
			want: []string{`network.asset_name is "USD Coin" but the token's EIP-712 domain says "Other Coin"`}},
		{name: "token of another name and version", edit: func(s *Setup) { s.Assets[0].Address = n.otherBoth },
			want: []string{
				`network.asset_name is "USD Coin" but the token's EIP-712 domain says "Other Coin"`,
				`network.asset_version is "2" but the token's EIP-712 domain says "1"`,
			}},
		{name: "signer without gas", edit: func(s *Setup) { s.Signer = n.broke },
			want: []string{"facilitator.key_env is the key of signer " + n.broke.Hex() + ", which has no balance on eip155:1337 (chain at test)"}},
		{name: "signer with little gas", edit: func(s *Setup) { s.Signer = n.poor },
			warn: "pays for fewer than 100 settlements"},
		{name: "remote facilitator: no signer", edit: func(s *Setup) { s.Signer = common.Address{} }},
		{name: "every problem at once", edit: func(s *Setup) {
			s.Assets = append(s.Assets, s.Assets[0], s.Assets[0])
			s.Assets[0].Address, s.Assets[2].Address, s.Signer = n.s.Addr(5), n.otherVersion, n.broke
		}, want: []string{
			"network.asset " + n.s.Addr(5).Hex() + " has no contract code",
			`network.asset_version is "2" but the token's EIP-712 domain says "1"`,
			"facilitator.key_env is the key of signer " + n.broke.Hex(),
		}},
		{name: "EIP-5267 domain", chain: declaring(n.s.Token, func(d *eip712Domain) {})},
		{name: "EIP-5267 domain of another version", chain: declaring(n.s.Token, func(d *eip712Domain) { d.Version = "3" }),
			want: []string{`network.asset_version is "2" but the token's EIP-712 domain says "3"`}},
		{name: "EIP-5267 domain of another chain", chain: declaring(n.s.Token, func(d *eip712Domain) { d.ChainID = big.NewInt(8453) }),
			want: []string{"network.asset " + n.s.Token.Hex() + " has an EIP-712 domain for chain id 8453, but eip155:1337 is chain id 1337"}},
		{name: "EIP-5267 domain of another contract", chain: declaring(n.s.Token, func(d *eip712Domain) { d.VerifyingContract = n.wallet }),
			want: []string{"network.asset " + n.s.Token.Hex() + " has an EIP-712 domain whose verifying contract is " + n.wallet.Hex() + ", not itself"}},
		{name: "EIP-5267 domain with a salt", chain: declaring(n.s.Token, func(d *eip712Domain) { d.Fields[0] = 0x1f }),
			want: []string{"declares an EIP-712 domain of name, version, chainId, verifyingContract, salt (eip712Domain())"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := n.setup()
			if tc.edit != nil {
				tc.edit(&s)
			}
			var c Chain = n.s.Client
			if tc.chain != nil {
				c = tc.chain(c)
			}
			var logs bytes.Buffer // Check logs from the calling goroutine only
			assets, err := Check(t.Context(), c, s, slog.New(slog.NewTextHandler(&logs, nil)))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if diff := cmp.Diff(s.Assets, assets); diff != "" {
					t.Errorf("assets (-want +got):\n%s", diff)
				}
			} else {
				if err == nil {
					t.Fatalf("Check passed, want %q", tc.want)
				}
				if _, ok := errors.AsType[*SetupError](err); !ok {
					t.Errorf("err = %v (%T), want a *SetupError", err, err)
				}
				if got := len(strings.Split(err.Error(), "\n")); got != len(tc.want) {
					t.Errorf("%d problems, want %d:\n%v", got, len(tc.want), err)
				}
				for _, want := range tc.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("err =\n%v\nwant it to contain %q", err, want)
					}
				}
			}
			switch got := logs.String(); {
			case tc.warn == "" && strings.Contains(got, "level=WARN"):
				t.Errorf("unexpected warning:\n%s", got)
			case tc.warn != "" && !strings.Contains(got, tc.warn):
				t.Errorf("log lacks %q:\n%s", tc.warn, got)
			}
		})
	}
}

// TestCheckReadsDomain: an asset given without name and version takes the
// token's, from DOMAIN_SEPARATOR()-checked name() and version() or from
// eip712Domain().
func TestCheckReadsDomain(t *testing.T) {
	n := newNode(t)
	tests := []struct {
		name  string
		asset common.Address
		chain func(c Chain) Chain
		want  Asset
	}{
		{name: "name() and version()", asset: n.otherVersion, want: Asset{Name: "USD Coin", Version: "1"}},
		{name: "eip712Domain()", asset: n.s.Token, chain: declaring(n.s.Token, func(d *eip712Domain) { d.Name = "USDC" }),
			want: Asset{Name: "USDC", Version: "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := n.setup()
			s.Assets = []Asset{{Address: tc.asset, Key: "--asset"}}
			var c Chain = n.s.Client
			if tc.chain != nil {
				c = tc.chain(c)
			}
			got, err := Check(t.Context(), c, s, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Address, tc.want.Key = tc.asset, "--asset"
			if diff := cmp.Diff([]Asset{tc.want}, got); diff != "" {
				t.Errorf("assets (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("not a token", func(t *testing.T) {
		s := n.setup()
		s.Assets = []Asset{{Address: n.wallet, Key: "--asset"}}
		_, err := Check(t.Context(), n.s.Client, s, slog.New(slog.DiscardHandler))
		if want := "--asset " + n.wallet.Hex() + " answers none of"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	})
}

// TestCheckNodeFailure: a node that fails is an error of its own, not a
// SetupError, so that the caller can redact its URL.
func TestCheckNodeFailure(t *testing.T) {
	n := newNode(t)
	failing := failingCalls{Chain: n.s.Client, err: errors.New("connection refused")}
	_, err := Check(t.Context(), failing, n.setup(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want the node's failure", err)
	}
	if errors.As(err, new(*SetupError)) {
		t.Errorf("err = %v is a *SetupError, want the node's failure", err)
	}
}

// eip712Domain is what a token implementing EIP-5267 answers.
type eip712Domain struct {
	Fields            [1]byte
	Name, Version     string
	ChainID           *big.Int
	VerifyingContract common.Address
}

// declaring returns a chain on which token also answers eip712Domain() with
// its domain ("USD Coin", "2", 1337, token) as edit changes it: our test
// token does not implement EIP-5267.
func declaring(token common.Address, edit func(d *eip712Domain)) func(c Chain) Chain {
	return func(c Chain) Chain {
		d := eip712Domain{Fields: [1]byte{fieldsExact}, Name: "USD Coin", Version: "2", ChainID: big.NewInt(testchain.SimulatedChainID), VerifyingContract: token}
		edit(&d)
		out, err := parsedABI.Methods["eip712Domain"].Outputs.Pack(d.Fields, d.Name, d.Version, d.ChainID, d.VerifyingContract, [32]byte{}, []*big.Int{})
		if err != nil {
			panic(err)
		}
		return domainCalls{Chain: c, token: token, out: out}
	}
}

// domainCalls answers eip712Domain() calls to token with out.
type domainCalls struct {
	Chain
	token common.Address
	out   []byte
}

func (d domainCalls) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	if msg.To != nil && *msg.To == d.token && bytes.HasPrefix(msg.Data, parsedABI.Methods["eip712Domain"].ID) {
		return d.out, nil
	}
	return d.Chain.CallContract(ctx, msg, block)
}

// failingCalls fails every contract call with err.
type failingCalls struct {
	Chain
	err error
}

func (f failingCalls) CallContract(context.Context, ethereum.CallMsg, *big.Int) ([]byte, error) {
	return nil, f.err
}
