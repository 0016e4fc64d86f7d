package upto

import (
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
)

// contractsABI is the part of the x402UptoPermit2Proxy, of Permit2, of an ERC-20
// token and of EIP-1271 that the scheme calls. The proxy's settle is as the
// official package's x402UptoPermit2ProxyABI declares it; its name is unique
// among these contracts, so one ABI holds them all.
const contractsABI = `[
{"type":"function","name":"settle","stateMutability":"nonpayable","inputs":[
 {"name":"permit","type":"tuple","components":[
  {"name":"permitted","type":"tuple","components":[{"name":"token","type":"address"},{"name":"amount","type":"uint256"}]},
  {"name":"nonce","type":"uint256"},
  {"name":"deadline","type":"uint256"}]},
 {"name":"amount","type":"uint256"},
 {"name":"owner","type":"address"},
 {"name":"witness","type":"tuple","components":[{"name":"to","type":"address"},{"name":"facilitator","type":"address"},{"name":"validAfter","type":"uint256"}]},
 {"name":"signature","type":"bytes"}],"outputs":[]},
{"type":"function","name":"PERMIT2","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"address"}]},
{"type":"function","name":"nonceBitmap","stateMutability":"view","inputs":[{"name":"owner","type":"address"},{"name":"wordPos","type":"uint256"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"balanceOf","stateMutability":"view","inputs":[{"name":"account","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"allowance","stateMutability":"view","inputs":[{"name":"owner","type":"address"},{"name":"spender","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"isValidSignature","stateMutability":"view","inputs":[{"name":"hash","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[{"name":"","type":"bytes4"}]},
{"type":"event","name":"Transfer","anonymous":false,"inputs":[{"name":"from","type":"address","indexed":true},{"name":"to","type":"address","indexed":true},{"name":"value","type":"uint256","indexed":false}]}
]` // #nosec G101 -- an ABI, not a credential

var (
	parsedABI = mustABI(contractsABI)

	// TopicTransfer is the ERC-20 Transfer event's topic.
	TopicTransfer = parsedABI.Events["Transfer"].ID
	// settleMethod is proxy.settle, whose calldata FindUse decodes.
	settleMethod = parsedABI.Methods["settle"]
)

// eip1271Magic is the value isValidSignature returns for a valid signature.
var eip1271Magic = [4]byte{0x16, 0x26, 0xba, 0x7e}

func mustABI(s string) abi.ABI {
	a, err := abi.JSON(strings.NewReader(s))
	if err != nil {
		panic(err)
	}
	return a
}

// The Go shapes go-ethereum's abi packs settle's tuples from: one field per
// component, named as the component with its first letter in upper case.
type (
	tokenPermissionsArg struct {
		Token  common.Address
		Amount *big.Int
	}
	permitArg struct {
		Permitted tokenPermissionsArg
		Nonce     *big.Int
		Deadline  *big.Int
	}
	witnessArg struct {
		To          common.Address
		Facilitator common.Address
		ValidAfter  *big.Int
	}
)
