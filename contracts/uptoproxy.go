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

// ISignatureTransferPermitTransferFrom is an auto generated low-level Go binding around an user-defined struct.
type ISignatureTransferPermitTransferFrom struct {
	Permitted ISignatureTransferTokenPermissions
	Nonce     *big.Int
	Deadline  *big.Int
}

// ISignatureTransferTokenPermissions is an auto generated low-level Go binding around an user-defined struct.
type ISignatureTransferTokenPermissions struct {
	Token  common.Address
	Amount *big.Int
}

// X402UptoPermit2ProxyEIP2612Permit is an auto generated low-level Go binding around an user-defined struct.
type X402UptoPermit2ProxyEIP2612Permit struct {
	Value    *big.Int
	Deadline *big.Int
	R        [32]byte
	S        [32]byte
	V        uint8
}

// X402UptoPermit2ProxyWitness is an auto generated low-level Go binding around an user-defined struct.
type X402UptoPermit2ProxyWitness struct {
	To          common.Address
	Facilitator common.Address
	ValidAfter  *big.Int
}

// X402UptoPermit2ProxyMetaData contains all meta data concerning the X402UptoPermit2Proxy contract.
var X402UptoPermit2ProxyMetaData = &bind.MetaData{
	ABI: "[{\"inputs\":[],\"name\":\"AmountExceedsPermitted\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"InvalidDestination\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"InvalidOwner\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"InvalidPermit2Address\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"PaymentTooEarly\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"Permit2612AmountMismatch\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"ReentrancyGuardReentrantCall\",\"type\":\"error\"},{\"inputs\":[],\"name\":\"UnauthorizedFacilitator\",\"type\":\"error\"},{\"anonymous\":false,\"inputs\":[],\"name\":\"Settled\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[],\"name\":\"SettledWithPermit\",\"type\":\"event\"},{\"inputs\":[],\"name\":\"PERMIT2\",\"outputs\":[{\"internalType\":\"contractISignatureTransfer\",\"name\":\"\",\"type\":\"address\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"WITNESS_TYPEHASH\",\"outputs\":[{\"internalType\":\"bytes32\",\"name\":\"\",\"type\":\"bytes32\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"WITNESS_TYPE_STRING\",\"outputs\":[{\"internalType\":\"string\",\"name\":\"\",\"type\":\"string\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"components\":[{\"components\":[{\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"}],\"internalType\":\"structISignatureTransfer.TokenPermissions\",\"name\":\"permitted\",\"type\":\"tuple\"},{\"internalType\":\"uint256\",\"name\":\"nonce\",\"type\":\"uint256\"},{\"internalType\":\"uint256\",\"name\":\"deadline\",\"type\":\"uint256\"}],\"internalType\":\"structISignatureTransfer.PermitTransferFrom\",\"name\":\"permit\",\"type\":\"tuple\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"address\",\"name\":\"owner\",\"type\":\"address\"},{\"components\":[{\"internalType\":\"address\",\"name\":\"to\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"facilitator\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"validAfter\",\"type\":\"uint256\"}],\"internalType\":\"structX402UptoPermit2Proxy.Witness\",\"name\":\"witness\",\"type\":\"tuple\"},{\"internalType\":\"bytes\",\"name\":\"signature\",\"type\":\"bytes\"}],\"name\":\"settle\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"components\":[{\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"},{\"internalType\":\"uint256\",\"name\":\"deadline\",\"type\":\"uint256\"},{\"internalType\":\"bytes32\",\"name\":\"r\",\"type\":\"bytes32\"},{\"internalType\":\"bytes32\",\"name\":\"s\",\"type\":\"bytes32\"},{\"internalType\":\"uint8\",\"name\":\"v\",\"type\":\"uint8\"}],\"internalType\":\"structX402UptoPermit2Proxy.EIP2612Permit\",\"name\":\"permit2612\",\"type\":\"tuple\"},{\"components\":[{\"components\":[{\"internalType\":\"address\",\"name\":\"token\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"}],\"internalType\":\"structISignatureTransfer.TokenPermissions\",\"name\":\"permitted\",\"type\":\"tuple\"},{\"internalType\":\"uint256\",\"name\":\"nonce\",\"type\":\"uint256\"},{\"internalType\":\"uint256\",\"name\":\"deadline\",\"type\":\"uint256\"}],\"internalType\":\"structISignatureTransfer.PermitTransferFrom\",\"name\":\"permit\",\"type\":\"tuple\"},{\"internalType\":\"uint256\",\"name\":\"amount\",\"type\":\"uint256\"},{\"internalType\":\"address\",\"name\":\"owner\",\"type\":\"address\"},{\"components\":[{\"internalType\":\"address\",\"name\":\"to\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"facilitator\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"validAfter\",\"type\":\"uint256\"}],\"internalType\":\"structX402UptoPermit2Proxy.Witness\",\"name\":\"witness\",\"type\":\"tuple\"},{\"internalType\":\"bytes\",\"name\":\"signature\",\"type\":\"bytes\"}],\"name\":\"settleWithPermit\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"}]",
	Bin: "0x6080604052348015600e575f5ffd5b5061091d8061001c5f395ff3fe608060405234801561000f575f5ffd5b5060043610610055575f3560e01c8063016c174814610059578063156e21521461006e5780632c03ae6a1461008c5780636afdd850146100c1578063ff11e7b4146100ef575b5f5ffd5b61006c610067366004610624565b610102565b005b610076610265565b60405161008391906106ea565b60405180910390f35b6100b37fd4171c445a74218b01d4fd8af34ff1106580ea1e36ff837e64484bfaa2253b7581565b604051908152602001610083565b6100d76e22d473030f116ddee9f6b43ac78ba381565b6040516001600160a01b039091168152602001610083565b61006c6100fd366004610703565b610281565b60ff5f5c161561012557604051633ee5aeb560e01b815260040160405180910390fd5b60015f805c60ff19168217905d5086356020870135146101585760405163050cda4960e01b815260040160405180910390fd5b6101656020870187610781565b6001600160a01b031663d505accf856e22d473030f116ddee9f6b43ac78ba38a3560208c013561019b60a08e0160808f0161079a565b604080516001600160e01b031960e089901b1681526001600160a01b0396871660048201529590941660248601526044850192909252606484015260ff1660848301528a013560a482015260608a013560c482015260e4015f604051808303815f87803b15801561020a575f5ffd5b505af192505050801561021b575060015b5061022a8686868686866102fa565b6040517fde5b89d10fc800c459329c382fabfcad0be0ed7e5328e01fae04e507b09ef5d8905f90a15f60ff19815c16815d5050505050505050565b6040518060a00160405280607881526020016108706078913981565b60ff5f5c16156102a457604051633ee5aeb560e01b815260040160405180910390fd5b60015f805c60ff19168217905d506102c08686868686866102fa565b6040517f97088ec3606cfe8cc112180570d03fcde05f9b8e1bfef8e27784eaf5dd5691b6905f90a15f60ff19815c16815d50505050505050565b61030a6040840160208501610781565b6001600160a01b0316336001600160a01b03161461033b57604051630f6fae8760e01b815260040160405180910390fd5b60208601358511156103605760405163fe64b4c760e01b815260040160405180910390fd5b6001600160a01b038416610387576040516349e27cff60e01b815260040160405180910390fd5b5f6103956020850185610781565b6001600160a01b0316036103bc5760405163ac6b05f560e01b815260040160405180910390fd5b82604001354210156103e15760405163532a9cfd60e11b815260040160405180910390fd5b6e22d473030f116ddee9f6b43ac78ba33b5f03610411576040516359106c8960e01b815260040160405180910390fd5b5f7fd4171c445a74218b01d4fd8af34ff1106580ea1e36ff837e64484bfaa2253b756104406020860186610781565b6104506040870160208801610781565b6040805160208101949094526001600160a01b039283168482015291166060830152850135608082015260a00160408051601f19818403018152828252805160209182012060a084019092529092506e22d473030f116ddee9f6b43ac78ba39163137c29fe918190606082019081906104cb908e018e610781565b6001600160a01b031681526020018c5f016020013581525081526020018a6040013581526020018a606001358152506040518060400160405280885f0160208101906105179190610781565b6001600160a01b031681526020018a81525088856040518060a00160405280607881526020016108706078913989896040518863ffffffff1660e01b815260040161056897969594939291906107ba565b5f604051808303815f87803b15801561057f575f5ffd5b505af1158015610591573d5f5f3e3d5ffd5b5050505050505050505050565b5f608082840312156105ae575f5ffd5b50919050565b80356001600160a01b03811681146105ca575f5ffd5b919050565b5f606082840312156105ae575f5ffd5b5f5f83601f8401126105ef575f5ffd5b50813567ffffffffffffffff811115610606575f5ffd5b60208301915083602082850101111561061d575f5ffd5b9250929050565b5f5f5f5f5f5f5f8789036101e081121561063c575f5ffd5b60a0811215610649575f5ffd5b5087965061065a8960a08a0161059e565b9550610120880135945061067161014089016105b4565b9350610681896101608a016105cf565b92506101c088013567ffffffffffffffff81111561069d575f5ffd5b6106a98a828b016105df565b989b979a50959850939692959293505050565b5f81518084528060208401602086015e5f602082860101526020601f19601f83011685010191505092915050565b602081525f6106fc60208301846106bc565b9392505050565b5f5f5f5f5f5f6101408789031215610719575f5ffd5b610723888861059e565b95506080870135945061073860a088016105b4565b93506107478860c089016105cf565b925061012087013567ffffffffffffffff811115610763575f5ffd5b61076f89828a016105df565b979a9699509497509295939492505050565b5f60208284031215610791575f5ffd5b6106fc826105b4565b5f602082840312156107aa575f5ffd5b813560ff811681146106fc575f5ffd5b6107d881895180516001600160a01b03168252602090810151910152565b602088015160408201526040880151606082015261080c608082018880516001600160a01b03168252602090810151910152565b60018060a01b03861660c08201528460e08201526101406101008201525f6108386101408301866106bc565b828103610120840152838152838560208301375f602085830101526020601f19601f8601168201019150509897505050505050505056fe5769746e657373207769746e65737329546f6b656e5065726d697373696f6e73286164647265737320746f6b656e2c75696e7432353620616d6f756e74295769746e657373286164647265737320746f2c6164647265737320666163696c697461746f722c75696e743235362076616c6964416674657229a264697066735822122030f3c35acf333dba8f8f184750997b6dd64200c3a43f62fa0b67e16f0e31deb264736f6c634300081c0033",
}

// X402UptoPermit2ProxyABI is the input ABI used to generate the binding from.
// Deprecated: Use X402UptoPermit2ProxyMetaData.ABI instead.
var X402UptoPermit2ProxyABI = X402UptoPermit2ProxyMetaData.ABI

// X402UptoPermit2ProxyBin is the compiled bytecode used for deploying new contracts.
// Deprecated: Use X402UptoPermit2ProxyMetaData.Bin instead.
var X402UptoPermit2ProxyBin = X402UptoPermit2ProxyMetaData.Bin

// DeployX402UptoPermit2Proxy deploys a new Ethereum contract, binding an instance of X402UptoPermit2Proxy to it.
func DeployX402UptoPermit2Proxy(auth *bind.TransactOpts, backend bind.ContractBackend) (common.Address, *types.Transaction, *X402UptoPermit2Proxy, error) {
	parsed, err := X402UptoPermit2ProxyMetaData.GetAbi()
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	if parsed == nil {
		return common.Address{}, nil, nil, errors.New("GetABI returned nil")
	}

	address, tx, contract, err := bind.DeployContract(auth, *parsed, common.FromHex(X402UptoPermit2ProxyBin), backend)
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	return address, tx, &X402UptoPermit2Proxy{X402UptoPermit2ProxyCaller: X402UptoPermit2ProxyCaller{contract: contract}, X402UptoPermit2ProxyTransactor: X402UptoPermit2ProxyTransactor{contract: contract}, X402UptoPermit2ProxyFilterer: X402UptoPermit2ProxyFilterer{contract: contract}}, nil
}

// X402UptoPermit2Proxy is an auto generated Go binding around an Ethereum contract.
type X402UptoPermit2Proxy struct {
	X402UptoPermit2ProxyCaller     // Read-only binding to the contract
	X402UptoPermit2ProxyTransactor // Write-only binding to the contract
	X402UptoPermit2ProxyFilterer   // Log filterer for contract events
}

// X402UptoPermit2ProxyCaller is an auto generated read-only Go binding around an Ethereum contract.
type X402UptoPermit2ProxyCaller struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// X402UptoPermit2ProxyTransactor is an auto generated write-only Go binding around an Ethereum contract.
type X402UptoPermit2ProxyTransactor struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// X402UptoPermit2ProxyFilterer is an auto generated log filtering Go binding around an Ethereum contract events.
type X402UptoPermit2ProxyFilterer struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// X402UptoPermit2ProxySession is an auto generated Go binding around an Ethereum contract,
// with pre-set call and transact options.
type X402UptoPermit2ProxySession struct {
	Contract     *X402UptoPermit2Proxy // Generic contract binding to set the session for
	CallOpts     bind.CallOpts         // Call options to use throughout this session
	TransactOpts bind.TransactOpts     // Transaction auth options to use throughout this session
}

// X402UptoPermit2ProxyCallerSession is an auto generated read-only Go binding around an Ethereum contract,
// with pre-set call options.
type X402UptoPermit2ProxyCallerSession struct {
	Contract *X402UptoPermit2ProxyCaller // Generic contract caller binding to set the session for
	CallOpts bind.CallOpts               // Call options to use throughout this session
}

// X402UptoPermit2ProxyTransactorSession is an auto generated write-only Go binding around an Ethereum contract,
// with pre-set transact options.
type X402UptoPermit2ProxyTransactorSession struct {
	Contract     *X402UptoPermit2ProxyTransactor // Generic contract transactor binding to set the session for
	TransactOpts bind.TransactOpts               // Transaction auth options to use throughout this session
}

// X402UptoPermit2ProxyRaw is an auto generated low-level Go binding around an Ethereum contract.
type X402UptoPermit2ProxyRaw struct {
	Contract *X402UptoPermit2Proxy // Generic contract binding to access the raw methods on
}

// X402UptoPermit2ProxyCallerRaw is an auto generated low-level read-only Go binding around an Ethereum contract.
type X402UptoPermit2ProxyCallerRaw struct {
	Contract *X402UptoPermit2ProxyCaller // Generic read-only contract binding to access the raw methods on
}

// X402UptoPermit2ProxyTransactorRaw is an auto generated low-level write-only Go binding around an Ethereum contract.
type X402UptoPermit2ProxyTransactorRaw struct {
	Contract *X402UptoPermit2ProxyTransactor // Generic write-only contract binding to access the raw methods on
}

// NewX402UptoPermit2Proxy creates a new instance of X402UptoPermit2Proxy, bound to a specific deployed contract.
func NewX402UptoPermit2Proxy(address common.Address, backend bind.ContractBackend) (*X402UptoPermit2Proxy, error) {
	contract, err := bindX402UptoPermit2Proxy(address, backend, backend, backend)
	if err != nil {
		return nil, err
	}
	return &X402UptoPermit2Proxy{X402UptoPermit2ProxyCaller: X402UptoPermit2ProxyCaller{contract: contract}, X402UptoPermit2ProxyTransactor: X402UptoPermit2ProxyTransactor{contract: contract}, X402UptoPermit2ProxyFilterer: X402UptoPermit2ProxyFilterer{contract: contract}}, nil
}

// NewX402UptoPermit2ProxyCaller creates a new read-only instance of X402UptoPermit2Proxy, bound to a specific deployed contract.
func NewX402UptoPermit2ProxyCaller(address common.Address, caller bind.ContractCaller) (*X402UptoPermit2ProxyCaller, error) {
	contract, err := bindX402UptoPermit2Proxy(address, caller, nil, nil)
	if err != nil {
		return nil, err
	}
	return &X402UptoPermit2ProxyCaller{contract: contract}, nil
}

// NewX402UptoPermit2ProxyTransactor creates a new write-only instance of X402UptoPermit2Proxy, bound to a specific deployed contract.
func NewX402UptoPermit2ProxyTransactor(address common.Address, transactor bind.ContractTransactor) (*X402UptoPermit2ProxyTransactor, error) {
	contract, err := bindX402UptoPermit2Proxy(address, nil, transactor, nil)
	if err != nil {
		return nil, err
	}
	return &X402UptoPermit2ProxyTransactor{contract: contract}, nil
}

// NewX402UptoPermit2ProxyFilterer creates a new log filterer instance of X402UptoPermit2Proxy, bound to a specific deployed contract.
func NewX402UptoPermit2ProxyFilterer(address common.Address, filterer bind.ContractFilterer) (*X402UptoPermit2ProxyFilterer, error) {
	contract, err := bindX402UptoPermit2Proxy(address, nil, nil, filterer)
	if err != nil {
		return nil, err
	}
	return &X402UptoPermit2ProxyFilterer{contract: contract}, nil
}

// bindX402UptoPermit2Proxy binds a generic wrapper to an already deployed contract.
func bindX402UptoPermit2Proxy(address common.Address, caller bind.ContractCaller, transactor bind.ContractTransactor, filterer bind.ContractFilterer) (*bind.BoundContract, error) {
	parsed, err := X402UptoPermit2ProxyMetaData.GetAbi()
	if err != nil {
		return nil, err
	}
	return bind.NewBoundContract(address, *parsed, caller, transactor, filterer), nil
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _X402UptoPermit2Proxy.Contract.X402UptoPermit2ProxyCaller.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.X402UptoPermit2ProxyTransactor.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.X402UptoPermit2ProxyTransactor.contract.Transact(opts, method, params...)
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCallerRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _X402UptoPermit2Proxy.Contract.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyTransactorRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyTransactorRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.contract.Transact(opts, method, params...)
}

// PERMIT2 is a free data retrieval call binding the contract method 0x6afdd850.
//
// Solidity: function PERMIT2() view returns(address)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCaller) PERMIT2(opts *bind.CallOpts) (common.Address, error) {
	var out []interface{}
	err := _X402UptoPermit2Proxy.contract.Call(opts, &out, "PERMIT2")

	if err != nil {
		return *new(common.Address), err
	}

	out0 := *abi.ConvertType(out[0], new(common.Address)).(*common.Address)

	return out0, err

}

// PERMIT2 is a free data retrieval call binding the contract method 0x6afdd850.
//
// Solidity: function PERMIT2() view returns(address)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxySession) PERMIT2() (common.Address, error) {
	return _X402UptoPermit2Proxy.Contract.PERMIT2(&_X402UptoPermit2Proxy.CallOpts)
}

// PERMIT2 is a free data retrieval call binding the contract method 0x6afdd850.
//
// Solidity: function PERMIT2() view returns(address)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCallerSession) PERMIT2() (common.Address, error) {
	return _X402UptoPermit2Proxy.Contract.PERMIT2(&_X402UptoPermit2Proxy.CallOpts)
}

// WITNESSTYPEHASH is a free data retrieval call binding the contract method 0x2c03ae6a.
//
// Solidity: function WITNESS_TYPEHASH() view returns(bytes32)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCaller) WITNESSTYPEHASH(opts *bind.CallOpts) ([32]byte, error) {
	var out []interface{}
	err := _X402UptoPermit2Proxy.contract.Call(opts, &out, "WITNESS_TYPEHASH")

	if err != nil {
		return *new([32]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([32]byte)).(*[32]byte)

	return out0, err

}

// WITNESSTYPEHASH is a free data retrieval call binding the contract method 0x2c03ae6a.
//
// Solidity: function WITNESS_TYPEHASH() view returns(bytes32)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxySession) WITNESSTYPEHASH() ([32]byte, error) {
	return _X402UptoPermit2Proxy.Contract.WITNESSTYPEHASH(&_X402UptoPermit2Proxy.CallOpts)
}

// WITNESSTYPEHASH is a free data retrieval call binding the contract method 0x2c03ae6a.
//
// Solidity: function WITNESS_TYPEHASH() view returns(bytes32)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCallerSession) WITNESSTYPEHASH() ([32]byte, error) {
	return _X402UptoPermit2Proxy.Contract.WITNESSTYPEHASH(&_X402UptoPermit2Proxy.CallOpts)
}

// WITNESSTYPESTRING is a free data retrieval call binding the contract method 0x156e2152.
//
// Solidity: function WITNESS_TYPE_STRING() view returns(string)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCaller) WITNESSTYPESTRING(opts *bind.CallOpts) (string, error) {
	var out []interface{}
	err := _X402UptoPermit2Proxy.contract.Call(opts, &out, "WITNESS_TYPE_STRING")

	if err != nil {
		return *new(string), err
	}

	out0 := *abi.ConvertType(out[0], new(string)).(*string)

	return out0, err

}

// WITNESSTYPESTRING is a free data retrieval call binding the contract method 0x156e2152.
//
// Solidity: function WITNESS_TYPE_STRING() view returns(string)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxySession) WITNESSTYPESTRING() (string, error) {
	return _X402UptoPermit2Proxy.Contract.WITNESSTYPESTRING(&_X402UptoPermit2Proxy.CallOpts)
}

// WITNESSTYPESTRING is a free data retrieval call binding the contract method 0x156e2152.
//
// Solidity: function WITNESS_TYPE_STRING() view returns(string)
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyCallerSession) WITNESSTYPESTRING() (string, error) {
	return _X402UptoPermit2Proxy.Contract.WITNESSTYPESTRING(&_X402UptoPermit2Proxy.CallOpts)
}

// Settle is a paid mutator transaction binding the contract method 0xff11e7b4.
//
// Solidity: function settle(((address,uint256),uint256,uint256) permit, uint256 amount, address owner, (address,address,uint256) witness, bytes signature) returns()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyTransactor) Settle(opts *bind.TransactOpts, permit ISignatureTransferPermitTransferFrom, amount *big.Int, owner common.Address, witness X402UptoPermit2ProxyWitness, signature []byte) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.contract.Transact(opts, "settle", permit, amount, owner, witness, signature)
}

// Settle is a paid mutator transaction binding the contract method 0xff11e7b4.
//
// Solidity: function settle(((address,uint256),uint256,uint256) permit, uint256 amount, address owner, (address,address,uint256) witness, bytes signature) returns()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxySession) Settle(permit ISignatureTransferPermitTransferFrom, amount *big.Int, owner common.Address, witness X402UptoPermit2ProxyWitness, signature []byte) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.Settle(&_X402UptoPermit2Proxy.TransactOpts, permit, amount, owner, witness, signature)
}

// Settle is a paid mutator transaction binding the contract method 0xff11e7b4.
//
// Solidity: function settle(((address,uint256),uint256,uint256) permit, uint256 amount, address owner, (address,address,uint256) witness, bytes signature) returns()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyTransactorSession) Settle(permit ISignatureTransferPermitTransferFrom, amount *big.Int, owner common.Address, witness X402UptoPermit2ProxyWitness, signature []byte) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.Settle(&_X402UptoPermit2Proxy.TransactOpts, permit, amount, owner, witness, signature)
}

// SettleWithPermit is a paid mutator transaction binding the contract method 0x016c1748.
//
// Solidity: function settleWithPermit((uint256,uint256,bytes32,bytes32,uint8) permit2612, ((address,uint256),uint256,uint256) permit, uint256 amount, address owner, (address,address,uint256) witness, bytes signature) returns()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyTransactor) SettleWithPermit(opts *bind.TransactOpts, permit2612 X402UptoPermit2ProxyEIP2612Permit, permit ISignatureTransferPermitTransferFrom, amount *big.Int, owner common.Address, witness X402UptoPermit2ProxyWitness, signature []byte) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.contract.Transact(opts, "settleWithPermit", permit2612, permit, amount, owner, witness, signature)
}

// SettleWithPermit is a paid mutator transaction binding the contract method 0x016c1748.
//
// Solidity: function settleWithPermit((uint256,uint256,bytes32,bytes32,uint8) permit2612, ((address,uint256),uint256,uint256) permit, uint256 amount, address owner, (address,address,uint256) witness, bytes signature) returns()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxySession) SettleWithPermit(permit2612 X402UptoPermit2ProxyEIP2612Permit, permit ISignatureTransferPermitTransferFrom, amount *big.Int, owner common.Address, witness X402UptoPermit2ProxyWitness, signature []byte) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.SettleWithPermit(&_X402UptoPermit2Proxy.TransactOpts, permit2612, permit, amount, owner, witness, signature)
}

// SettleWithPermit is a paid mutator transaction binding the contract method 0x016c1748.
//
// Solidity: function settleWithPermit((uint256,uint256,bytes32,bytes32,uint8) permit2612, ((address,uint256),uint256,uint256) permit, uint256 amount, address owner, (address,address,uint256) witness, bytes signature) returns()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyTransactorSession) SettleWithPermit(permit2612 X402UptoPermit2ProxyEIP2612Permit, permit ISignatureTransferPermitTransferFrom, amount *big.Int, owner common.Address, witness X402UptoPermit2ProxyWitness, signature []byte) (*types.Transaction, error) {
	return _X402UptoPermit2Proxy.Contract.SettleWithPermit(&_X402UptoPermit2Proxy.TransactOpts, permit2612, permit, amount, owner, witness, signature)
}

// X402UptoPermit2ProxySettledIterator is returned from FilterSettled and is used to iterate over the raw logs and unpacked data for Settled events raised by the X402UptoPermit2Proxy contract.
type X402UptoPermit2ProxySettledIterator struct {
	Event *X402UptoPermit2ProxySettled // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *X402UptoPermit2ProxySettledIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(X402UptoPermit2ProxySettled)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(X402UptoPermit2ProxySettled)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *X402UptoPermit2ProxySettledIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *X402UptoPermit2ProxySettledIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// X402UptoPermit2ProxySettled represents a Settled event raised by the X402UptoPermit2Proxy contract.
type X402UptoPermit2ProxySettled struct {
	Raw types.Log // Blockchain specific contextual infos
}

// FilterSettled is a free log retrieval operation binding the contract event 0x97088ec3606cfe8cc112180570d03fcde05f9b8e1bfef8e27784eaf5dd5691b6.
//
// Solidity: event Settled()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyFilterer) FilterSettled(opts *bind.FilterOpts) (*X402UptoPermit2ProxySettledIterator, error) {

	logs, sub, err := _X402UptoPermit2Proxy.contract.FilterLogs(opts, "Settled")
	if err != nil {
		return nil, err
	}
	return &X402UptoPermit2ProxySettledIterator{contract: _X402UptoPermit2Proxy.contract, event: "Settled", logs: logs, sub: sub}, nil
}

// WatchSettled is a free log subscription operation binding the contract event 0x97088ec3606cfe8cc112180570d03fcde05f9b8e1bfef8e27784eaf5dd5691b6.
//
// Solidity: event Settled()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyFilterer) WatchSettled(opts *bind.WatchOpts, sink chan<- *X402UptoPermit2ProxySettled) (event.Subscription, error) {

	logs, sub, err := _X402UptoPermit2Proxy.contract.WatchLogs(opts, "Settled")
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(X402UptoPermit2ProxySettled)
				if err := _X402UptoPermit2Proxy.contract.UnpackLog(event, "Settled", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseSettled is a log parse operation binding the contract event 0x97088ec3606cfe8cc112180570d03fcde05f9b8e1bfef8e27784eaf5dd5691b6.
//
// Solidity: event Settled()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyFilterer) ParseSettled(log types.Log) (*X402UptoPermit2ProxySettled, error) {
	event := new(X402UptoPermit2ProxySettled)
	if err := _X402UptoPermit2Proxy.contract.UnpackLog(event, "Settled", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// X402UptoPermit2ProxySettledWithPermitIterator is returned from FilterSettledWithPermit and is used to iterate over the raw logs and unpacked data for SettledWithPermit events raised by the X402UptoPermit2Proxy contract.
type X402UptoPermit2ProxySettledWithPermitIterator struct {
	Event *X402UptoPermit2ProxySettledWithPermit // Event containing the contract specifics and raw log

	contract *bind.BoundContract // Generic contract to use for unpacking event data
	event    string              // Event name to use for unpacking event data

	logs chan types.Log        // Log channel receiving the found contract events
	sub  ethereum.Subscription // Subscription for errors, completion and termination
	done bool                  // Whether the subscription completed delivering logs
	fail error                 // Occurred error to stop iteration
}

// Next advances the iterator to the subsequent event, returning whether there
// are any more events found. In case of a retrieval or parsing error, false is
// returned and Error() can be queried for the exact failure.
func (it *X402UptoPermit2ProxySettledWithPermitIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(X402UptoPermit2ProxySettledWithPermit)
			if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
				it.fail = err
				return false
			}
			it.Event.Raw = log
			return true

		default:
			return false
		}
	}
	// Iterator still in progress, wait for either a data or an error event
	select {
	case log := <-it.logs:
		it.Event = new(X402UptoPermit2ProxySettledWithPermit)
		if err := it.contract.UnpackLog(it.Event, it.event, log); err != nil {
			it.fail = err
			return false
		}
		it.Event.Raw = log
		return true

	case err := <-it.sub.Err():
		it.done = true
		it.fail = err
		return it.Next()
	}
}

// Error returns any retrieval or parsing error occurred during filtering.
func (it *X402UptoPermit2ProxySettledWithPermitIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *X402UptoPermit2ProxySettledWithPermitIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// X402UptoPermit2ProxySettledWithPermit represents a SettledWithPermit event raised by the X402UptoPermit2Proxy contract.
type X402UptoPermit2ProxySettledWithPermit struct {
	Raw types.Log // Blockchain specific contextual infos
}

// FilterSettledWithPermit is a free log retrieval operation binding the contract event 0xde5b89d10fc800c459329c382fabfcad0be0ed7e5328e01fae04e507b09ef5d8.
//
// Solidity: event SettledWithPermit()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyFilterer) FilterSettledWithPermit(opts *bind.FilterOpts) (*X402UptoPermit2ProxySettledWithPermitIterator, error) {

	logs, sub, err := _X402UptoPermit2Proxy.contract.FilterLogs(opts, "SettledWithPermit")
	if err != nil {
		return nil, err
	}
	return &X402UptoPermit2ProxySettledWithPermitIterator{contract: _X402UptoPermit2Proxy.contract, event: "SettledWithPermit", logs: logs, sub: sub}, nil
}

// WatchSettledWithPermit is a free log subscription operation binding the contract event 0xde5b89d10fc800c459329c382fabfcad0be0ed7e5328e01fae04e507b09ef5d8.
//
// Solidity: event SettledWithPermit()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyFilterer) WatchSettledWithPermit(opts *bind.WatchOpts, sink chan<- *X402UptoPermit2ProxySettledWithPermit) (event.Subscription, error) {

	logs, sub, err := _X402UptoPermit2Proxy.contract.WatchLogs(opts, "SettledWithPermit")
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(X402UptoPermit2ProxySettledWithPermit)
				if err := _X402UptoPermit2Proxy.contract.UnpackLog(event, "SettledWithPermit", log); err != nil {
					// If the signature doesn't match, skip this log.
					if errors.Is(err, bind.ErrEventSignatureMismatch) {
						continue
					}
					return err
				}
				event.Raw = log

				select {
				case sink <- event:
				case err := <-sub.Err():
					return err
				case <-quit:
					return nil
				}
			case err := <-sub.Err():
				return err
			case <-quit:
				return nil
			}
		}
	}), nil
}

// ParseSettledWithPermit is a log parse operation binding the contract event 0xde5b89d10fc800c459329c382fabfcad0be0ed7e5328e01fae04e507b09ef5d8.
//
// Solidity: event SettledWithPermit()
func (_X402UptoPermit2Proxy *X402UptoPermit2ProxyFilterer) ParseSettledWithPermit(log types.Log) (*X402UptoPermit2ProxySettledWithPermit, error) {
	event := new(X402UptoPermit2ProxySettledWithPermit)
	if err := _X402UptoPermit2Proxy.contract.UnpackLog(event, "SettledWithPermit", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}
