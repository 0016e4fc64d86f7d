package exact

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
)

// Test vectors for the x402 v2 spec's example and for chain 1337, checked
// against viem.
func TestVectors(t *testing.T) {
	tests := []struct {
		name                       string
		domain                     Domain
		auth                       Authorization
		separator, struct_, digest string
		signature                  string
		signer                     string
	}{
		{
			name:   "base sepolia spec example",
			domain: Domain{Name: "USDC", Version: "2", ChainID: big.NewInt(84532), VerifyingContract: common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")},
			auth: Authorization{
				From:        common.HexToAddress("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
				To:          common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
				Value:       big.NewInt(10000),
				ValidAfter:  big.NewInt(1740672089),
				ValidBefore: big.NewInt(1740672154),
				Nonce:       common.HexToHash("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
			},
			separator: "0x71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818",
			struct_:   "0x49ad644555c7bdf3ea4fc022a4940ae5589b230b1dde0065c5504fa19bbe39a4",
			digest:    "0xf256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6",
			signature: "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
			signer:    "0x857b06519E91e3A54538791bDbb0E22373e36b66",
		},
		{
			name:   "local chain 1337",
			domain: Domain{Name: "USD Coin", Version: "2", ChainID: big.NewInt(1337), VerifyingContract: common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3")},
			auth: Authorization{
				From:        common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
				To:          common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
				Value:       big.NewInt(10000),
				ValidAfter:  big.NewInt(0),
				ValidBefore: big.NewInt(1900000000),
				Nonce:       common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111"),
			},
			separator: "0xa11c17fa999444eac02ad5c31d56a2efa814fdbfb3e461cd5f6ea19b7e95df1b",
			struct_:   "0x26c13dd90e22a5c4e48a7473300d0b6b73e11f5f59586b70ae63f9051caff6e7",
			digest:    "0x71c6aa66d31c998b4114d85e541311fe82a9e9fb15ba542b5b570ff5125dc86f",
			signature: "0x7cb5821558d6cf39e8e6282ce098a9c63ee53a89fa4289d5338fd2927313bc5d5445ee5a5b8e34579a11e9fb4894a561d868478e1841cb85f8d93bb16c0b1d7e1c",
			signer:    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.domain.Separator().Hex(); got != tc.separator {
				t.Errorf("separator = %s, want %s", got, tc.separator)
			}
			if got := tc.auth.StructHash().Hex(); got != tc.struct_ {
				t.Errorf("struct hash = %s, want %s", got, tc.struct_)
			}
			digest := Digest(tc.domain, &tc.auth)
			if got := digest.Hex(); got != tc.digest {
				t.Errorf("digest = %s, want %s", got, tc.digest)
			}
			got, err := recoverEOA(digest, hexutil.MustDecode(tc.signature))
			if err != nil || got != common.HexToAddress(tc.signer) {
				t.Errorf("recover = %s, %v; want %s", got.Hex(), err, tc.signer)
			}
		})
	}
}

// TestSignDeterministic checks that our signer reproduces viem's RFC 6979
// signature for dev key #0.
func TestSignDeterministic(t *testing.T) {
	key, err := crypto.HexToECDSA("ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80")
	if err != nil {
		t.Fatal(err)
	}
	digest := common.HexToHash("0x71c6aa66d31c998b4114d85e541311fe82a9e9fb15ba542b5b570ff5125dc86f")
	sig, err := NewKeySigner(key).SignDigest(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	const want = "0x7cb5821558d6cf39e8e6282ce098a9c63ee53a89fa4289d5338fd2927313bc5d5445ee5a5b8e34579a11e9fb4894a561d868478e1841cb85f8d93bb16c0b1d7e1c"
	if got := hexutil.Encode(sig); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
}
