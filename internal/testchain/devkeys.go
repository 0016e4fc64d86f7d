package testchain

import (
	"crypto/ecdsa"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/devchain"
)

// DevMnemonic is the well-known mnemonic whose first ten accounts
// (m/44'/60'/0'/0/i) anvil and hardhat fund by default.
const DevMnemonic = "test test test test test test test test test test test junk"

// NumDevKeys is how many dev keys DevKey and DevAddress know.
const NumDevKeys = devchain.NumKeys

// DevKey returns a fresh copy of dev key i (0 to NumDevKeys-1) of
// DevMnemonic; DevKey(0) controls 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266,
// anvil's first account. It panics if i is out of range.
func DevKey(i int) *ecdsa.PrivateKey {
	if i < 0 || i >= NumDevKeys {
		panic(fmt.Sprintf("testchain: dev key %d out of range [0, %d)", i, NumDevKeys))
	}
	return devchain.Key(i)
}

// DevAddress returns the address of DevKey(i). It panics if i is out of range.
func DevAddress(i int) common.Address {
	return crypto.PubkeyToAddress(DevKey(i).PublicKey)
}
