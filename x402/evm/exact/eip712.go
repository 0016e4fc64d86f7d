package exact

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// Type hashes of the EIP-712 structures involved (EIP-3009 and EIP-712).
var (
	domainTypeHash   = crypto.Keccak256Hash([]byte("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"))
	transferTypeHash = crypto.Keccak256Hash([]byte("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"))
)

// Domain is a token's EIP-712 domain.
type Domain struct {
	Name              string
	Version           string
	ChainID           *big.Int
	VerifyingContract common.Address
}

// Separator returns the domain separator hash.
func (d Domain) Separator() common.Hash {
	var buf [5 * 32]byte
	copy(buf[0:], domainTypeHash[:])
	name, version := crypto.Keccak256Hash([]byte(d.Name)), crypto.Keccak256Hash([]byte(d.Version))
	copy(buf[32:], name[:])
	copy(buf[64:], version[:])
	d.ChainID.FillBytes(buf[96:128])
	copy(buf[128+12:], d.VerifyingContract[:])
	return keccak256(buf[:])
}

// StructHash returns the EIP-712 hash of the TransferWithAuthorization message.
// The caller guarantees the integers fit in 256 bits (ParseUint256 does).
func (a *Authorization) StructHash() common.Hash {
	var buf [7 * 32]byte
	copy(buf[0:], transferTypeHash[:])
	copy(buf[32+12:], a.From[:])
	copy(buf[64+12:], a.To[:])
	a.Value.FillBytes(buf[96:128])
	a.ValidAfter.FillBytes(buf[128:160])
	a.ValidBefore.FillBytes(buf[160:192])
	copy(buf[192:], a.Nonce[:])
	return keccak256(buf[:])
}

// Digest returns the hash the payer signs: keccak256(0x1901 ‖ domainSeparator ‖
// structHash).
func Digest(d Domain, a *Authorization) common.Hash {
	return digestWith(d.Separator(), a)
}

func digestWith(separator common.Hash, a *Authorization) common.Hash {
	var buf [2 + 32 + 32]byte
	buf[0], buf[1] = 0x19, 0x01
	copy(buf[2:], separator[:])
	sh := a.StructHash()
	copy(buf[34:], sh[:])
	return keccak256(buf[:])
}
