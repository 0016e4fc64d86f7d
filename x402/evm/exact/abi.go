package exact

import (
	"bytes"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/crypto"
)

// tokenABI is the part of an EIP-3009 token (FiatToken v2) and of EIP-1271 that
// the scheme calls.
const tokenABI = `[
{"type":"function","name":"transferWithAuthorization","stateMutability":"nonpayable","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},{"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}],"outputs":[]},
{"type":"function","name":"transferWithAuthorization0","stateMutability":"nonpayable","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[]},
{"type":"function","name":"authorizationState","stateMutability":"view","inputs":[{"name":"authorizer","type":"address"},{"name":"nonce","type":"bytes32"}],"outputs":[{"name":"","type":"bool"}]},
{"type":"function","name":"balanceOf","stateMutability":"view","inputs":[{"name":"account","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"name","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"version","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"isValidSignature","stateMutability":"view","inputs":[{"name":"hash","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[{"name":"","type":"bytes4"}]},
{"type":"event","name":"AuthorizationUsed","anonymous":false,"inputs":[{"name":"authorizer","type":"address","indexed":true},{"name":"nonce","type":"bytes32","indexed":true}]},
{"type":"event","name":"AuthorizationCanceled","anonymous":false,"inputs":[{"name":"authorizer","type":"address","indexed":true},{"name":"nonce","type":"bytes32","indexed":true}]},
{"type":"event","name":"Transfer","anonymous":false,"inputs":[{"name":"from","type":"address","indexed":true},{"name":"to","type":"address","indexed":true},{"name":"value","type":"uint256","indexed":false}]}
]` // #nosec G101 -- an ABI, not a credential

var (
	parsedABI = mustABI(tokenABI)

	// The overload taking `bytes signature` shares the name on chain; it is stored
	// under a distinct name here and packed with its real selector.
	selectorTransferBytes = crypto.Keccak256([]byte("transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"))[:4]

	// Event topics.
	TopicAuthorizationUsed     = parsedABI.Events["AuthorizationUsed"].ID
	TopicAuthorizationCanceled = parsedABI.Events["AuthorizationCanceled"].ID
	TopicTransfer              = parsedABI.Events["Transfer"].ID
)

// eip1271Magic is the value isValidSignature returns for a valid signature.
var eip1271Magic = [4]byte{0x16, 0x26, 0xba, 0x7e}

// eip6492Suffix ends an ERC-6492 wrapped signature.
var eip6492Suffix = bytes.Repeat([]byte{0x64, 0x92}, 16)

func mustABI(s string) abi.ABI {
	a, err := abi.JSON(strings.NewReader(s))
	if err != nil {
		panic(err)
	}
	return a
}
