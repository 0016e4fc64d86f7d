package upto

import "github.com/ethereum/go-ethereum/accounts/abi"

// ContractsABIForTest lets the external tests decode the calls the verifier
// makes with the ABI it packs them with.
func ContractsABIForTest() abi.ABI { return parsedABI }
