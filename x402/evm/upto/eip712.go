package upto

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// Canonical contract addresses, the same on every chain (CREATE2). A fresh dev
// chain has neither until someone deploys them.
var (
	// Permit2Address is Uniswap's canonical Permit2, the verifying contract of
	// the signature and the holder of the payer's token allowance.
	Permit2Address = common.HexToAddress("0x000000000022D473030F116dDEE9F6B43aC78BA3")
	// ProxyAddress is the x402UptoPermit2Proxy, the permit's spender: it calls
	// Permit2 on behalf of the witness's facilitator with the charged amount.
	ProxyAddress = common.HexToAddress("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002")
)

// WitnessTypeString is the proxy's WITNESS_TYPE_STRING: what Permit2 appends
// to "PermitWitnessTransferFrom(TokenPermissions permitted,address
// spender,uint256 nonce,uint256 deadline," to build the type it hashes.
const WitnessTypeString = "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"

// EIP-712 type hashes. The primary type's encodeType lists the referenced types
// sorted by name after it, as EIP-712 requires and as Permit2 concatenates it.
var (
	domainTypeHash           = crypto.Keccak256Hash([]byte("EIP712Domain(string name,uint256 chainId,address verifyingContract)"))
	permitWitnessTypeHash    = crypto.Keccak256Hash([]byte("PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline," + WitnessTypeString))
	tokenPermissionsTypeHash = crypto.Keccak256Hash([]byte("TokenPermissions(address token,uint256 amount)"))
	witnessTypeHash          = crypto.Keccak256Hash([]byte("Witness(address to,address facilitator,uint256 validAfter)"))
	permit2NameHash          = crypto.Keccak256Hash([]byte("Permit2"))
)

// DomainSeparator returns Permit2's EIP-712 domain separator on a chain:
// name "Permit2", the chain id and Permit2's address, and no version field.
func DomainSeparator(chainID *big.Int) common.Hash {
	var buf [4 * 32]byte
	copy(buf[0:], domainTypeHash[:])
	copy(buf[32:], permit2NameHash[:])
	chainID.FillBytes(buf[64:96])
	copy(buf[96+12:], Permit2Address[:])
	return crypto.Keccak256Hash(buf[:])
}

// StructHash returns the EIP-712 hash of the PermitWitnessTransferFrom message.
// The caller guarantees the integers fit in 256 bits (the parsers do).
func (a *Authorization) StructHash() common.Hash {
	var tp [3 * 32]byte
	copy(tp[0:], tokenPermissionsTypeHash[:])
	copy(tp[32+12:], a.Permitted.Token[:])
	a.Permitted.Amount.FillBytes(tp[64:96])

	var w [4 * 32]byte
	copy(w[0:], witnessTypeHash[:])
	copy(w[32+12:], a.Witness.To[:])
	copy(w[64+12:], a.Witness.Facilitator[:])
	a.Witness.ValidAfter.FillBytes(w[96:128])

	var buf [6 * 32]byte
	copy(buf[0:], permitWitnessTypeHash[:])
	tph, wh := crypto.Keccak256Hash(tp[:]), crypto.Keccak256Hash(w[:])
	copy(buf[32:], tph[:])
	copy(buf[64+12:], a.Spender[:])
	a.Nonce.FillBytes(buf[96:128])
	a.Deadline.FillBytes(buf[128:160])
	copy(buf[160:], wh[:])
	return crypto.Keccak256Hash(buf[:])
}

// Digest returns the hash the payer signs: keccak256(0x1901 ‖ Permit2's domain
// separator on chainID ‖ structHash).
func Digest(chainID *big.Int, a *Authorization) common.Hash {
	sep, sh := DomainSeparator(chainID), a.StructHash()
	var buf [2 + 32 + 32]byte
	buf[0], buf[1] = 0x19, 0x01
	copy(buf[2:], sep[:])
	copy(buf[34:], sh[:])
	return crypto.Keccak256Hash(buf[:])
}
