package upto

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// TestTypeHashes pins the EIP-712 type hashes: the upto encodeType must hash
// to the value of the x402 upto specification, and the Permit2 domain has no
// version field.
func TestTypeHashes(t *testing.T) {
	tests := []struct {
		name string
		got  common.Hash
		want string
	}{
		{"PermitWitnessTransferFrom with the upto Witness", permitWitnessTypeHash, "0x51dff6974ad4388c499e7fcfe838d2bd767162553a144098ce20ea661d70c2ee"},
		{"EIP712Domain without version", domainTypeHash, "0x8cad95687ba82c2ce50e74f7b754645e5117c3a5bec8151c0726d5857980a866"},
		{"TokenPermissions", tokenPermissionsTypeHash, crypto.Keccak256Hash([]byte("TokenPermissions(address token,uint256 amount)")).Hex()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got.Hex() != tc.want {
				t.Errorf("type hash = %s, want %s", tc.got.Hex(), tc.want)
			}
		})
	}
	const full = "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
	if got := crypto.Keccak256Hash([]byte(full)); got != permitWitnessTypeHash {
		t.Errorf("the full encodeType hashes to %s, not the type hash in use", got.Hex())
	}
	if Permit2Address.Hex() != "0x000000000022D473030F116dDEE9F6B43aC78BA3" || ProxyAddress.Hex() != "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002" {
		t.Errorf("addresses: Permit2 %s, proxy %s", Permit2Address.Hex(), ProxyAddress.Hex())
	}
}

// TestVectors checks the domain separator, struct hash, digest and signature
// against values computed by viem 2.57.20 (hashDomain, hashStruct,
// hashTypedData, signTypedData) with @x402/evm 2.27.0's
// uptoPermit2WitnessTypes, signed by anvil's dev key 0.
func TestVectors(t *testing.T) {
	auth := Authorization{
		From:      common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
		Permitted: TokenPermissions{Token: common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3"), Amount: big.NewInt(5_000_000)},
		Spender:   ProxyAddress,
		Nonce:     common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111").Big(),
		Deadline:  big.NewInt(1_900_000_000),
		Witness: Witness{
			To:          common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
			Facilitator: common.HexToAddress("0x90F79bf6EB2c4f870365E785982E1f101E93b906"),
			ValidAfter:  big.NewInt(0),
		},
	}
	const structHash = "0x85fa4f26a75ceecfea3e190a2b427b622f4ba6dcec237ed59c5508dbf906bd20"
	tests := []struct {
		chainID                      int64
		separator, digest, signature string
	}{
		{1337, "0x1f520b5ee38ad937955892c3dfc7055e8eeb515d905781b6951e4c687917c530",
			"0x3788e8bb2edec71e3bfab418d0cf862b786861977ff8e0e09153134752c76b06",
			"0x1df2d0d45a73c5cb8c690fb941b12cf321e9f1ab096afbba60ba51438f5a223e0e3cd3f6fb2fdb406848a6e3a9bdb41a76ae779f1cd81bd716dfcc9abf195a261b"},
		{8453, "0x3b6f35e4fce979ef8eac3bcdc8c3fc38fe7911bb0c69c8fe72bf1fd1a17e6f07",
			"0x599fef0eb6f1e2c3fc30f48f299186598232d5f481663b5235d262c8ead027fc",
			"0x22eae45b32e0765f75455c71bcd14c9426448b938280553eefd4d801b0e485281e2e5106f6563a3083391945a24af00c267e2177a251c3fc51c201c023172e051c"},
	}
	key, err := crypto.HexToECDSA("ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80")
	if err != nil {
		t.Fatal(err)
	}
	signer := exact.NewKeySigner(key)
	for _, tc := range tests {
		chainID := big.NewInt(tc.chainID)
		if got := DomainSeparator(chainID).Hex(); got != tc.separator {
			t.Errorf("chain %d: separator %s, want %s", tc.chainID, got, tc.separator)
		}
		if got := auth.StructHash().Hex(); got != structHash {
			t.Errorf("struct hash %s, want %s", got, structHash)
		}
		d := Digest(chainID, &auth)
		if d.Hex() != tc.digest {
			t.Errorf("chain %d: digest %s, want %s", tc.chainID, d.Hex(), tc.digest)
		}
		sig, err := signer.SignDigest(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		if got := hexutil.Encode(sig); got != tc.signature {
			t.Errorf("chain %d: signature %s, want viem's %s", tc.chainID, got, tc.signature)
		}
		if got, err := recoverEOA(d, hexutil.MustDecode(tc.signature)); err != nil || got != auth.From {
			t.Errorf("chain %d: viem's signature recovers to %s, %v", tc.chainID, got.Hex(), err)
		}
	}
}
