package credits

import (
	"bytes"
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// eip1271Magic is what isValidSignature(bytes32,bytes) returns for a valid
// signature: its own selector, bytes4(keccak256("isValidSignature(bytes32,bytes)")).
var eip1271Magic = [4]byte{0x16, 0x26, 0xba, 0x7e}

// EIP1271 asks contract wallets whether they accept a signature by calling
// their isValidSignature(bytes32,bytes) at the latest block (EIP-1271).
// Create it with NewEIP1271.
type EIP1271 struct {
	chain ethereum.ContractCaller
}

// NewEIP1271 returns an EIP1271 that calls wallets through chain: an
// *ethclient.Client, or the simulated backend's client.
func NewEIP1271(chain ethereum.ContractCaller) *EIP1271 {
	return &EIP1271{chain: chain}
}

// IsValidSignature reports whether the contract at wallet returns the
// EIP-1271 magic value for hash and sig. A wallet that answers anything
// else, reverts, or has no code (an externally owned account, or a wallet
// not deployed yet) did not sign: false with a nil error. An error is a
// call that could not be made or answered, such as a node that is down.
func (e *EIP1271) IsValidSignature(ctx context.Context, wallet common.Address, hash common.Hash, sig []byte) (bool, error) {
	out, err := e.chain.CallContract(ctx, ethereum.CallMsg{To: &wallet, Data: isValidSignatureCall(hash, sig)}, nil)
	if err != nil {
		if exact.IsRevert(err) {
			return false, nil
		}
		return false, fmt.Errorf("call isValidSignature: %w", err)
	}
	return isMagicWord(out), nil
}

// isMagicWord reports whether out is the ABI encoding of the magic bytes4:
// the 4 bytes left-aligned in a word whose other 28 bytes are zero. Checking
// the whole word, as OpenZeppelin's SignatureChecker does, refuses a
// contract that echoes its calldata back (a proxy's fallback, say): the
// echo starts with the selector, which is the magic value, followed by the
// hash.
func isMagicWord(out []byte) bool {
	var want [32]byte
	copy(want[:], eip1271Magic[:])
	return len(out) >= len(want) && bytes.Equal(out[:len(want)], want[:])
}

// isValidSignatureCall ABI-encodes isValidSignature(hash, sig): the
// selector, the hash, the offset of the bytes (two words in), their length
// and the bytes zero-padded to a whole number of words.
func isValidSignatureCall(hash common.Hash, sig []byte) []byte {
	padded := (len(sig) + 31) / 32 * 32
	data := make([]byte, 4+3*32+padded)
	copy(data, eip1271Magic[:]) // the selector is the magic value
	copy(data[4:], hash[:])
	big.NewInt(2 * 32).FillBytes(data[4+32 : 4+2*32])
	big.NewInt(int64(len(sig))).FillBytes(data[4+2*32 : 4+3*32])
	copy(data[4+3*32:], sig)
	return data
}

var _ ContractSigs = (*EIP1271)(nil)
