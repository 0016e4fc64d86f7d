// Code generated - DO NOT EDIT.
// This file is a generated binding and any manual changes will be lost.

package contracts

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"time"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/event"
)

// Reference imports to suppress errors if they are not otherwise used.
var (
	_ = errors.New
	_ = big.NewInt
	_ = strings.NewReader
	_ = ethereum.NotFound
	_ = bind.Bind
	_ = common.Big1
	_ = types.BloomLookup
	_ = event.NewSubscription
	_ = abi.ConvertType
	_ = time.Tick
	_ = context.Background
)

// ERC1271WalletMetaData contains all meta data concerning the ERC1271Wallet contract.
var ERC1271WalletMetaData = &bind.MetaData{
	ABI: "[{\"inputs\":[{\"internalType\":\"address\",\"name\":\"owner_\",\"type\":\"address\"}],\"stateMutability\":\"nonpayable\",\"type\":\"constructor\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"target\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"},{\"internalType\":\"bytes\",\"name\":\"data\",\"type\":\"bytes\"}],\"name\":\"execute\",\"outputs\":[{\"internalType\":\"bytes\",\"name\":\"\",\"type\":\"bytes\"}],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"bytes32\",\"name\":\"hash\",\"type\":\"bytes32\"},{\"internalType\":\"bytes\",\"name\":\"signature\",\"type\":\"bytes\"}],\"name\":\"isValidSignature\",\"outputs\":[{\"internalType\":\"bytes4\",\"name\":\"\",\"type\":\"bytes4\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"owner\",\"outputs\":[{\"internalType\":\"address\",\"name\":\"\",\"type\":\"address\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"stateMutability\":\"payable\",\"type\":\"receive\"}]",
	Bin: "0x60a060405234801561000f575f5ffd5b5060405161063538038061063583398101604081905261002e916100aa565b6001600160a01b0381166100995760405162461bcd60e51b815260206004820152602860248201527f4552433132373157616c6c65743a206f776e657220697320746865207a65726f604482015267206164647265737360c01b606482015260840160405180910390fd5b6001600160a01b03166080526100d7565b5f602082840312156100ba575f5ffd5b81516001600160a01b03811681146100d0575f5ffd5b9392505050565b60805161053a6100fb5f395f8181608f0152818160f80152610166015261053a5ff3fe608060405260043610610036575f3560e01c80631626ba7e146100415780638da5cb5b1461007e578063b61d27f6146100c9575f5ffd5b3661003d57005b5f5ffd5b34801561004c575f5ffd5b5061006061005b3660046103bc565b6100f5565b6040516001600160e01b031990911681526020015b60405180910390f35b348015610089575f5ffd5b506100b17f000000000000000000000000000000000000000000000000000000000000000081565b6040516001600160a01b039091168152602001610075565b3480156100d4575f5ffd5b506100e86100e3366004610404565b610159565b6040516100759190610467565b5f7f00000000000000000000000000000000000000000000000000000000000000006001600160a01b031661012b85858561025e565b6001600160a01b0316036101475750630b135d3f60e11b610152565b506001600160e01b03195b9392505050565b6060336001600160a01b037f000000000000000000000000000000000000000000000000000000000000000016146101e65760405162461bcd60e51b815260206004820152602660248201527f4552433132373157616c6c65743a2063616c6c6572206973206e6f74207468656044820152651037bbb732b960d11b606482015260840160405180910390fd5b5f5f866001600160a01b031686868660405161020392919061049c565b5f6040518083038185875af1925050503d805f811461023d576040519150601f19603f3d011682016040523d82523d5f602084013e610242565b606091505b50915091508161025457805160208201fd5b9695505050505050565b5f6041821461026e57505f610152565b5f61027c60208285876104ab565b610285916104d2565b90505f6102966040602086886104ab565b61029f916104d2565b90505f858560408181106102b5576102b56104f0565b919091013560f81c9150507f7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a082118061030157508060ff16601b1415801561030157508060ff16601c14155b15610311575f9350505050610152565b604080515f81526020810180835289905260ff831691810191909152606081018490526080810183905260019060a0016020604051602081039080840390855afa158015610361573d5f5f3e3d5ffd5b5050604051601f19015198975050505050505050565b5f5f83601f840112610387575f5ffd5b50813567ffffffffffffffff81111561039e575f5ffd5b6020830191508360208285010111156103b5575f5ffd5b9250929050565b5f5f5f604084860312156103ce575f5ffd5b83359250602084013567ffffffffffffffff8111156103eb575f5ffd5b6103f786828701610377565b9497909650939450505050565b5f5f5f5f60608587031215610417575f5ffd5b84356001600160a01b038116811461042d575f5ffd5b935060208501359250604085013567ffffffffffffffff81111561044f575f5ffd5b61045b87828801610377565b95989497509550505050565b602081525f82518060208401528060208501604085015e5f604082850101526040601f19601f83011684010191505092915050565b818382375f9101908152919050565b5f5f858511156104b9575f5ffd5b838611156104c5575f5ffd5b5050820193919092039150565b803560208310156104ea575f19602084900360031b1b165b92915050565b634e487b7160e01b5f52603260045260245ffdfea264697066735822122014d77baf2cf7191703a26ecb8186e2325fb281064cffda388203262ddf859dc764736f6c634300081c0033",
}

// ERC1271WalletABI is the input ABI used to generate the binding from.
// Deprecated: Use ERC1271WalletMetaData.ABI instead.
var ERC1271WalletABI = ERC1271WalletMetaData.ABI

// ERC1271WalletBin is the compiled bytecode used for deploying new contracts.
// Deprecated: Use ERC1271WalletMetaData.Bin instead.
var ERC1271WalletBin = ERC1271WalletMetaData.Bin

// DeployERC1271Wallet deploys a new Ethereum contract, binding an instance of ERC1271Wallet to it.
func DeployERC1271Wallet(auth *bind.TransactOpts, backend bind.ContractBackend, owner_ common.Address) (common.Address, *types.Transaction, *ERC1271Wallet, error) {
	parsed, err := ERC1271WalletMetaData.GetAbi()
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	if parsed == nil {
		return common.Address{}, nil, nil, errors.New("GetABI returned nil")
	}

	address, tx, contract, err := bind.DeployContract(auth, *parsed, common.FromHex(ERC1271WalletBin), backend, owner_)
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	return address, tx, &ERC1271Wallet{ERC1271WalletCaller: ERC1271WalletCaller{contract: contract}, ERC1271WalletTransactor: ERC1271WalletTransactor{contract: contract}, ERC1271WalletFilterer: ERC1271WalletFilterer{contract: contract}}, nil
}

// ERC1271Wallet is an auto generated Go binding around an Ethereum contract.
type ERC1271Wallet struct {
	ERC1271WalletCaller     // Read-only binding to the contract
	ERC1271WalletTransactor // Write-only binding to the contract
	ERC1271WalletFilterer   // Log filterer for contract events
}

// ERC1271WalletCaller is an auto generated read-only Go binding around an Ethereum contract.
type ERC1271WalletCaller struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ERC1271WalletTransactor is an auto generated write-only Go binding around an Ethereum contract.
type ERC1271WalletTransactor struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ERC1271WalletFilterer is an auto generated log filtering Go binding around an Ethereum contract events.
type ERC1271WalletFilterer struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ERC1271WalletSession is an auto generated Go binding around an Ethereum contract,
// with pre-set call and transact options.
type ERC1271WalletSession struct {
	Contract     *ERC1271Wallet    // Generic contract binding to set the session for
	CallOpts     bind.CallOpts     // Call options to use throughout this session
	TransactOpts bind.TransactOpts // Transaction auth options to use throughout this session
}

// ERC1271WalletCallerSession is an auto generated read-only Go binding around an Ethereum contract,
// with pre-set call options.
type ERC1271WalletCallerSession struct {
	Contract *ERC1271WalletCaller // Generic contract caller binding to set the session for
	CallOpts bind.CallOpts        // Call options to use throughout this session
}

// ERC1271WalletTransactorSession is an auto generated write-only Go binding around an Ethereum contract,
// with pre-set transact options.
type ERC1271WalletTransactorSession struct {
	Contract     *ERC1271WalletTransactor // Generic contract transactor binding to set the session for
	TransactOpts bind.TransactOpts        // Transaction auth options to use throughout this session
}

// ERC1271WalletRaw is an auto generated low-level Go binding around an Ethereum contract.
type ERC1271WalletRaw struct {
	Contract *ERC1271Wallet // Generic contract binding to access the raw methods on
}

// ERC1271WalletCallerRaw is an auto generated low-level read-only Go binding around an Ethereum contract.
type ERC1271WalletCallerRaw struct {
	Contract *ERC1271WalletCaller // Generic read-only contract binding to access the raw methods on
}

// ERC1271WalletTransactorRaw is an auto generated low-level write-only Go binding around an Ethereum contract.
type ERC1271WalletTransactorRaw struct {
	Contract *ERC1271WalletTransactor // Generic write-only contract binding to access the raw methods on
}

// NewERC1271Wallet creates a new instance of ERC1271Wallet, bound to a specific deployed contract.
func NewERC1271Wallet(address common.Address, backend bind.ContractBackend) (*ERC1271Wallet, error) {
	contract, err := bindERC1271Wallet(address, backend, backend, backend)
	if err != nil {
		return nil, err
	}
	return &ERC1271Wallet{ERC1271WalletCaller: ERC1271WalletCaller{contract: contract}, ERC1271WalletTransactor: ERC1271WalletTransactor{contract: contract}, ERC1271WalletFilterer: ERC1271WalletFilterer{contract: contract}}, nil
}

// NewERC1271WalletCaller creates a new read-only instance of ERC1271Wallet, bound to a specific deployed contract.
func NewERC1271WalletCaller(address common.Address, caller bind.ContractCaller) (*ERC1271WalletCaller, error) {
	contract, err := bindERC1271Wallet(address, caller, nil, nil)
	if err != nil {
		return nil, err
	}
	return &ERC1271WalletCaller{contract: contract}, nil
}

// NewERC1271WalletTransactor creates a new write-only instance of ERC1271Wallet, bound to a specific deployed contract.
func NewERC1271WalletTransactor(address common.Address, transactor bind.ContractTransactor) (*ERC1271WalletTransactor, error) {
	contract, err := bindERC1271Wallet(address, nil, transactor, nil)
	if err != nil {
		return nil, err
	}
	return &ERC1271WalletTransactor{contract: contract}, nil
}

// NewERC1271WalletFilterer creates a new log filterer instance of ERC1271Wallet, bound to a specific deployed contract.
func NewERC1271WalletFilterer(address common.Address, filterer bind.ContractFilterer) (*ERC1271WalletFilterer, error) {
	contract, err := bindERC1271Wallet(address, nil, nil, filterer)
	if err != nil {
		return nil, err
	}
	return &ERC1271WalletFilterer{contract: contract}, nil
}

// bindERC1271Wallet binds a generic wrapper to an already deployed contract.
func bindERC1271Wallet(address common.Address, caller bind.ContractCaller, transactor bind.ContractTransactor, filterer bind.ContractFilterer) (*bind.BoundContract, error) {
	parsed, err := ERC1271WalletMetaData.GetAbi()
	if err != nil {
		return nil, err
	}
	return bind.NewBoundContract(address, *parsed, caller, transactor, filterer), nil
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_ERC1271Wallet *ERC1271WalletRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _ERC1271Wallet.Contract.ERC1271WalletCaller.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_ERC1271Wallet *ERC1271WalletRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.ERC1271WalletTransactor.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_ERC1271Wallet *ERC1271WalletRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.ERC1271WalletTransactor.contract.Transact(opts, method, params...)
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_ERC1271Wallet *ERC1271WalletCallerRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _ERC1271Wallet.Contract.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_ERC1271Wallet *ERC1271WalletTransactorRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_ERC1271Wallet *ERC1271WalletTransactorRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.contract.Transact(opts, method, params...)
}

// IsValidSignature is a free data retrieval call binding the contract method 0x1626ba7e.
//
// Solidity: function isValidSignature(bytes32 hash, bytes signature) view returns(bytes4)
func (_ERC1271Wallet *ERC1271WalletCaller) IsValidSignature(opts *bind.CallOpts, hash [32]byte, signature []byte) ([4]byte, error) {
	var out []interface{}
	err := _ERC1271Wallet.contract.Call(opts, &out, "isValidSignature", hash, signature)

	if err != nil {
		return *new([4]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([4]byte)).(*[4]byte)

	return out0, err

}

// IsValidSignature is a free data retrieval call binding the contract method 0x1626ba7e.
//
// Solidity: function isValidSignature(bytes32 hash, bytes signature) view returns(bytes4)
func (_ERC1271Wallet *ERC1271WalletSession) IsValidSignature(hash [32]byte, signature []byte) ([4]byte, error) {
	return _ERC1271Wallet.Contract.IsValidSignature(&_ERC1271Wallet.CallOpts, hash, signature)
}

// IsValidSignature is a free data retrieval call binding the contract method 0x1626ba7e.
//
// Solidity: function isValidSignature(bytes32 hash, bytes signature) view returns(bytes4)
func (_ERC1271Wallet *ERC1271WalletCallerSession) IsValidSignature(hash [32]byte, signature []byte) ([4]byte, error) {
	return _ERC1271Wallet.Contract.IsValidSignature(&_ERC1271Wallet.CallOpts, hash, signature)
}

// Owner is a free data retrieval call binding the contract method 0x8da5cb5b.
//
// Solidity: function owner() view returns(address)
func (_ERC1271Wallet *ERC1271WalletCaller) Owner(opts *bind.CallOpts) (common.Address, error) {
	var out []interface{}
	err := _ERC1271Wallet.contract.Call(opts, &out, "owner")

	if err != nil {
		return *new(common.Address), err
	}

	out0 := *abi.ConvertType(out[0], new(common.Address)).(*common.Address)

	return out0, err

}

// Owner is a free data retrieval call binding the contract method 0x8da5cb5b.
//
// Solidity: function owner() view returns(address)
func (_ERC1271Wallet *ERC1271WalletSession) Owner() (common.Address, error) {
	return _ERC1271Wallet.Contract.Owner(&_ERC1271Wallet.CallOpts)
}

// Owner is a free data retrieval call binding the contract method 0x8da5cb5b.
//
// Solidity: function owner() view returns(address)
func (_ERC1271Wallet *ERC1271WalletCallerSession) Owner() (common.Address, error) {
	return _ERC1271Wallet.Contract.Owner(&_ERC1271Wallet.CallOpts)
}

// Execute is a paid mutator transaction binding the contract method 0xb61d27f6.
//
// Solidity: function execute(address target, uint256 value, bytes data) returns(bytes)
func (_ERC1271Wallet *ERC1271WalletTransactor) Execute(opts *bind.TransactOpts, target common.Address, value *big.Int, data []byte) (*types.Transaction, error) {
	return _ERC1271Wallet.contract.Transact(opts, "execute", target, value, data)
}

// Execute is a paid mutator transaction binding the contract method 0xb61d27f6.
//
// Solidity: function execute(address target, uint256 value, bytes data) returns(bytes)
func (_ERC1271Wallet *ERC1271WalletSession) Execute(target common.Address, value *big.Int, data []byte) (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.Execute(&_ERC1271Wallet.TransactOpts, target, value, data)
}

// Execute is a paid mutator transaction binding the contract method 0xb61d27f6.
//
// Solidity: function execute(address target, uint256 value, bytes data) returns(bytes)
func (_ERC1271Wallet *ERC1271WalletTransactorSession) Execute(target common.Address, value *big.Int, data []byte) (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.Execute(&_ERC1271Wallet.TransactOpts, target, value, data)
}

// Receive is a paid mutator transaction binding the contract receive function.
//
// Solidity: receive() payable returns()
func (_ERC1271Wallet *ERC1271WalletTransactor) Receive(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ERC1271Wallet.contract.RawTransact(opts, nil) // calldata is disallowed for receive function
}

// Receive is a paid mutator transaction binding the contract receive function.
//
// Solidity: receive() payable returns()
func (_ERC1271Wallet *ERC1271WalletSession) Receive() (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.Receive(&_ERC1271Wallet.TransactOpts)
}

// Receive is a paid mutator transaction binding the contract receive function.
//
// Solidity: receive() payable returns()
func (_ERC1271Wallet *ERC1271WalletTransactorSession) Receive() (*types.Transaction, error) {
	return _ERC1271Wallet.Contract.Receive(&_ERC1271Wallet.TransactOpts)
}
