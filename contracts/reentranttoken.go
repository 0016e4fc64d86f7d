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

// ReentrantTokenMetaData contains all meta data concerning the ReentrantToken contract.
var ReentrantTokenMetaData = &bind.MetaData{
	ABI: "[{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"address\",\"name\":\"owner\",\"type\":\"address\"},{\"indexed\":true,\"internalType\":\"address\",\"name\":\"spender\",\"type\":\"address\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"}],\"name\":\"Approval\",\"type\":\"event\"},{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"address\",\"name\":\"from\",\"type\":\"address\"},{\"indexed\":true,\"internalType\":\"address\",\"name\":\"to\",\"type\":\"address\"},{\"indexed\":false,\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"}],\"name\":\"Transfer\",\"type\":\"event\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"\",\"type\":\"address\"}],\"name\":\"allowance\",\"outputs\":[{\"internalType\":\"uint256\",\"name\":\"\",\"type\":\"uint256\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"spender\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"}],\"name\":\"approve\",\"outputs\":[{\"internalType\":\"bool\",\"name\":\"\",\"type\":\"bool\"}],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"\",\"type\":\"address\"}],\"name\":\"balanceOf\",\"outputs\":[{\"internalType\":\"uint256\",\"name\":\"\",\"type\":\"uint256\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"lastReentryResult\",\"outputs\":[{\"internalType\":\"bytes\",\"name\":\"\",\"type\":\"bytes\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"lastReentrySucceeded\",\"outputs\":[{\"internalType\":\"bool\",\"name\":\"\",\"type\":\"bool\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"to\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"}],\"name\":\"mint\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"reentryData\",\"outputs\":[{\"internalType\":\"bytes\",\"name\":\"\",\"type\":\"bytes\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[],\"name\":\"reentryTarget\",\"outputs\":[{\"internalType\":\"address\",\"name\":\"\",\"type\":\"address\"}],\"stateMutability\":\"view\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"target\",\"type\":\"address\"},{\"internalType\":\"bytes\",\"name\":\"data\",\"type\":\"bytes\"}],\"name\":\"setReentry\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"},{\"inputs\":[{\"internalType\":\"address\",\"name\":\"from\",\"type\":\"address\"},{\"internalType\":\"address\",\"name\":\"to\",\"type\":\"address\"},{\"internalType\":\"uint256\",\"name\":\"value\",\"type\":\"uint256\"}],\"name\":\"transferFrom\",\"outputs\":[{\"internalType\":\"bool\",\"name\":\"\",\"type\":\"bool\"}],\"stateMutability\":\"nonpayable\",\"type\":\"function\"}]",
	Bin: "0x6080604052348015600e575f5ffd5b50610a338061001c5f395ff3fe608060405234801561000f575f5ffd5b506004361061009b575f3560e01c8063995b1eba11610063578063995b1eba1461012f578063b36ae5e61461013c578063dd62ed3e14610151578063debbfc771461017b578063eb9d77f914610183575f5ffd5b8063095ea7b31461009f57806323b872dd146100c757806340c10f19146100da57806358f63fb8146100ef57806370a0823114610102575b5f5ffd5b6100b26100ad3660046105df565b6101ae565b60405190151581526020015b60405180910390f35b6100b26100d5366004610607565b61021a565b6100ed6100e83660046105df565b61048d565b005b6100ed6100fd366004610641565b6104fd565b6101216101103660046106bf565b5f6020819052908152604090205481565b6040519081526020016100be565b6004546100b29060ff1681565b61014461052b565b6040516100be91906106df565b61012161015f366004610714565b600160209081525f928352604080842090915290825290205481565b6101446105b7565b600254610196906001600160a01b031681565b6040516001600160a01b0390911681526020016100be565b335f8181526001602090815260408083206001600160a01b038716808552925280832085905551919290917f8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925906102089086815260200190565b60405180910390a35060015b92915050565b6002545f906001600160a01b0316156102c757600280546001600160a01b031981169091556040516001600160a01b0390911690819061025c9060039061077d565b5f604051808303815f865af19150503d805f8114610295576040519150601f19603f3d011682016040523d82523d5f602084013e61029a565b606091505b5060045f60056102aa848261084e565b508391906101000a81548160ff0219169083151502179055505050505b6001600160a01b0384165f90815260016020908152604080832033845290915290205482111561033e5760405162461bcd60e51b815260206004820152601960248201527f5265656e7472616e74546f6b656e3a20616c6c6f77616e63650000000000000060448201526064015b60405180910390fd5b6001600160a01b0384165f908152602081905260409020548211156103a55760405162461bcd60e51b815260206004820152601760248201527f5265656e7472616e74546f6b656e3a2062616c616e63650000000000000000006044820152606401610335565b6001600160a01b0384165f908152600160209081526040808320338452909152812080548492906103d790849061091d565b90915550506001600160a01b0384165f908152602081905260408120805484929061040390849061091d565b90915550506001600160a01b0383165f908152602081905260408120805484929061042f908490610930565b92505081905550826001600160a01b0316846001600160a01b03167fddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef8460405161047b91815260200190565b60405180910390a35060019392505050565b6001600160a01b0382165f90815260208190526040812080548392906104b4908490610930565b90915550506040518181526001600160a01b038316905f907fddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef9060200160405180910390a35050565b600280546001600160a01b0319166001600160a01b0385161790556003610525828483610943565b50505050565b6003805461053890610745565b80601f016020809104026020016040519081016040528092919081815260200182805461056490610745565b80156105af5780601f10610586576101008083540402835291602001916105af565b820191905f5260205f20905b81548152906001019060200180831161059257829003601f168201915b505050505081565b6005805461053890610745565b80356001600160a01b03811681146105da575f5ffd5b919050565b5f5f604083850312156105f0575f5ffd5b6105f9836105c4565b946020939093013593505050565b5f5f5f60608486031215610619575f5ffd5b610622846105c4565b9250610630602085016105c4565b929592945050506040919091013590565b5f5f5f60408486031215610653575f5ffd5b61065c846105c4565b9250602084013567ffffffffffffffff811115610677575f5ffd5b8401601f81018613610687575f5ffd5b803567ffffffffffffffff81111561069d575f5ffd5b8660208284010111156106ae575f5ffd5b939660209190910195509293505050565b5f602082840312156106cf575f5ffd5b6106d8826105c4565b9392505050565b602081525f82518060208401528060208501604085015e5f604082850101526040601f19601f83011684010191505092915050565b5f5f60408385031215610725575f5ffd5b61072e836105c4565b915061073c602084016105c4565b90509250929050565b600181811c9082168061075957607f821691505b60208210810361077757634e487b7160e01b5f52602260045260245ffd5b50919050565b5f5f835461078a81610745565b6001821680156107a157600181146107b6576107e3565b60ff19831686528115158202860193506107e3565b865f5260205f205f5b838110156107db578154888201526001909101906020016107bf565b505081860193505b509195945050505050565b634e487b7160e01b5f52604160045260245ffd5b601f82111561084957805f5260205f20601f840160051c810160208510156108275750805b601f840160051c820191505b81811015610846575f8155600101610833565b50505b505050565b815167ffffffffffffffff811115610868576108686107ee565b61087c816108768454610745565b84610802565b6020601f8211600181146108ae575f83156108975750848201515b5f19600385901b1c1916600184901b178455610846565b5f84815260208120601f198516915b828110156108dd57878501518255602094850194600190920191016108bd565b50848210156108fa57868401515f19600387901b60f8161c191681555b50505050600190811b01905550565b634e487b7160e01b5f52601160045260245ffd5b8181038181111561021457610214610909565b8082018082111561021457610214610909565b67ffffffffffffffff83111561095b5761095b6107ee565b61096f836109698354610745565b83610802565b5f601f8411600181146109a0575f85156109895750838201355b5f19600387901b1c1916600186901b178355610846565b5f83815260208120601f198716915b828110156109cf57868501358255602094850194600190920191016109af565b50868210156109eb575f1960f88860031b161c19848701351681555b505060018560011b018355505050505056fea2646970667358221220fe455c62d4110b10d4a75ca0a0b9f81c8d2f11ef88c51310ac06653e0fb6f28d64736f6c634300081c0033",
}

// ReentrantTokenABI is the input ABI used to generate the binding from.
// Deprecated: Use ReentrantTokenMetaData.ABI instead.
var ReentrantTokenABI = ReentrantTokenMetaData.ABI

// ReentrantTokenBin is the compiled bytecode used for deploying new contracts.
// Deprecated: Use ReentrantTokenMetaData.Bin instead.
var ReentrantTokenBin = ReentrantTokenMetaData.Bin

// DeployReentrantToken deploys a new Ethereum contract, binding an instance of ReentrantToken to it.
func DeployReentrantToken(auth *bind.TransactOpts, backend bind.ContractBackend) (common.Address, *types.Transaction, *ReentrantToken, error) {
	parsed, err := ReentrantTokenMetaData.GetAbi()
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	if parsed == nil {
		return common.Address{}, nil, nil, errors.New("GetABI returned nil")
	}

	address, tx, contract, err := bind.DeployContract(auth, *parsed, common.FromHex(ReentrantTokenBin), backend)
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	return address, tx, &ReentrantToken{ReentrantTokenCaller: ReentrantTokenCaller{contract: contract}, ReentrantTokenTransactor: ReentrantTokenTransactor{contract: contract}, ReentrantTokenFilterer: ReentrantTokenFilterer{contract: contract}}, nil
}

// ReentrantToken is an auto generated Go binding around an Ethereum contract.
type ReentrantToken struct {
	ReentrantTokenCaller     // Read-only binding to the contract
	ReentrantTokenTransactor // Write-only binding to the contract
	ReentrantTokenFilterer   // Log filterer for contract events
}

// ReentrantTokenCaller is an auto generated read-only Go binding around an Ethereum contract.
type ReentrantTokenCaller struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ReentrantTokenTransactor is an auto generated write-only Go binding around an Ethereum contract.
type ReentrantTokenTransactor struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ReentrantTokenFilterer is an auto generated log filtering Go binding around an Ethereum contract events.
type ReentrantTokenFilterer struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ReentrantTokenSession is an auto generated Go binding around an Ethereum contract,
// with pre-set call and transact options.
type ReentrantTokenSession struct {
	Contract     *ReentrantToken   // Generic contract binding to set the session for
	CallOpts     bind.CallOpts     // Call options to use throughout this session
	TransactOpts bind.TransactOpts // Transaction auth options to use throughout this session
}

// ReentrantTokenCallerSession is an auto generated read-only Go binding around an Ethereum contract,
// with pre-set call options.
type ReentrantTokenCallerSession struct {
	Contract *ReentrantTokenCaller // Generic contract caller binding to set the session for
	CallOpts bind.CallOpts         // Call options to use throughout this session
}

// ReentrantTokenTransactorSession is an auto generated write-only Go binding around an Ethereum contract,
// with pre-set transact options.
type ReentrantTokenTransactorSession struct {
	Contract     *ReentrantTokenTransactor // Generic contract transactor binding to set the session for
	TransactOpts bind.TransactOpts         // Transaction auth options to use throughout this session
}

// ReentrantTokenRaw is an auto generated low-level Go binding around an Ethereum contract.
type ReentrantTokenRaw struct {
	Contract *ReentrantToken // Generic contract binding to access the raw methods on
}

// ReentrantTokenCallerRaw is an auto generated low-level read-only Go binding around an Ethereum contract.
type ReentrantTokenCallerRaw struct {
	Contract *ReentrantTokenCaller // Generic read-only contract binding to access the raw methods on
}

// ReentrantTokenTransactorRaw is an auto generated low-level write-only Go binding around an Ethereum contract.
type ReentrantTokenTransactorRaw struct {
	Contract *ReentrantTokenTransactor // Generic write-only contract binding to access the raw methods on
}

// NewReentrantToken creates a new instance of ReentrantToken, bound to a specific deployed contract.
func NewReentrantToken(address common.Address, backend bind.ContractBackend) (*ReentrantToken, error) {
	contract, err := bindReentrantToken(address, backend, backend, backend)
	if err != nil {
		return nil, err
	}
	return &ReentrantToken{ReentrantTokenCaller: ReentrantTokenCaller{contract: contract}, ReentrantTokenTransactor: ReentrantTokenTransactor{contract: contract}, ReentrantTokenFilterer: ReentrantTokenFilterer{contract: contract}}, nil
}

// NewReentrantTokenCaller creates a new read-only instance of ReentrantToken, bound to a specific deployed contract.
func NewReentrantTokenCaller(address common.Address, caller bind.ContractCaller) (*ReentrantTokenCaller, error) {
	contract, err := bindReentrantToken(address, caller, nil, nil)
	if err != nil {
		return nil, err
	}
	return &ReentrantTokenCaller{contract: contract}, nil
}

// NewReentrantTokenTransactor creates a new write-only instance of ReentrantToken, bound to a specific deployed contract.
func NewReentrantTokenTransactor(address common.Address, transactor bind.ContractTransactor) (*ReentrantTokenTransactor, error) {
	contract, err := bindReentrantToken(address, nil, transactor, nil)
	if err != nil {
		return nil, err
	}
	return &ReentrantTokenTransactor{contract: contract}, nil
}

// NewReentrantTokenFilterer creates a new log filterer instance of ReentrantToken, bound to a specific deployed contract.
func NewReentrantTokenFilterer(address common.Address, filterer bind.ContractFilterer) (*ReentrantTokenFilterer, error) {
	contract, err := bindReentrantToken(address, nil, nil, filterer)
	if err != nil {
		return nil, err
	}
	return &ReentrantTokenFilterer{contract: contract}, nil
}

// bindReentrantToken binds a generic wrapper to an already deployed contract.
func bindReentrantToken(address common.Address, caller bind.ContractCaller, transactor bind.ContractTransactor, filterer bind.ContractFilterer) (*bind.BoundContract, error) {
	parsed, err := ReentrantTokenMetaData.GetAbi()
	if err != nil {
		return nil, err
	}
	return bind.NewBoundContract(address, *parsed, caller, transactor, filterer), nil
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_ReentrantToken *ReentrantTokenRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _ReentrantToken.Contract.ReentrantTokenCaller.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_ReentrantToken *ReentrantTokenRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ReentrantToken.Contract.ReentrantTokenTransactor.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_ReentrantToken *ReentrantTokenRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _ReentrantToken.Contract.ReentrantTokenTransactor.contract.Transact(opts, method, params...)
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_ReentrantToken *ReentrantTokenCallerRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _ReentrantToken.Contract.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_ReentrantToken *ReentrantTokenTransactorRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ReentrantToken.Contract.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_ReentrantToken *ReentrantTokenTransactorRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _ReentrantToken.Contract.contract.Transact(opts, method, params...)
}

// Allowance is a free data retrieval call binding the contract method 0xdd62ed3e.
//
// Solidity: function allowance(address , address ) view returns(uint256)
func (_ReentrantToken *ReentrantTokenCaller) Allowance(opts *bind.CallOpts, arg0 common.Address, arg1 common.Address) (*big.Int, error) {
	var out []interface{}
	err := _ReentrantToken.contract.Call(opts, &out, "allowance", arg0, arg1)

	if err != nil {
		return *new(*big.Int), err
	}

	out0 := *abi.ConvertType(out[0], new(*big.Int)).(**big.Int)

	return out0, err

}

// Allowance is a free data retrieval call binding the contract method 0xdd62ed3e.
//
// Solidity: function allowance(address , address ) view returns(uint256)
func (_ReentrantToken *ReentrantTokenSession) Allowance(arg0 common.Address, arg1 common.Address) (*big.Int, error) {
	return _ReentrantToken.Contract.Allowance(&_ReentrantToken.CallOpts, arg0, arg1)
}

// Allowance is a free data retrieval call binding the contract method 0xdd62ed3e.
//
// Solidity: function allowance(address , address ) view returns(uint256)
func (_ReentrantToken *ReentrantTokenCallerSession) Allowance(arg0 common.Address, arg1 common.Address) (*big.Int, error) {
	return _ReentrantToken.Contract.Allowance(&_ReentrantToken.CallOpts, arg0, arg1)
}

// BalanceOf is a free data retrieval call binding the contract method 0x70a08231.
//
// Solidity: function balanceOf(address ) view returns(uint256)
func (_ReentrantToken *ReentrantTokenCaller) BalanceOf(opts *bind.CallOpts, arg0 common.Address) (*big.Int, error) {
	var out []interface{}
	err := _ReentrantToken.contract.Call(opts, &out, "balanceOf", arg0)

	if err != nil {
		return *new(*big.Int), err
	}

	out0 := *abi.ConvertType(out[0], new(*big.Int)).(**big.Int)

	return out0, err

}

// BalanceOf is a free data retrieval call binding the contract method 0x70a08231.
//
// Solidity: function balanceOf(address ) view returns(uint256)
func (_ReentrantToken *ReentrantTokenSession) BalanceOf(arg0 common.Address) (*big.Int, error) {
	return _ReentrantToken.Contract.BalanceOf(&_ReentrantToken.CallOpts, arg0)
}

// BalanceOf is a free data retrieval call binding the contract method 0x70a08231.
//
// Solidity: function balanceOf(address ) view returns(uint256)
func (_ReentrantToken *ReentrantTokenCallerSession) BalanceOf(arg0 common.Address) (*big.Int, error) {
	return _ReentrantToken.Contract.BalanceOf(&_ReentrantToken.CallOpts, arg0)
}

// LastReentryResult is a free data retrieval call binding the contract method 0xdebbfc77.
//
// Solidity: function lastReentryResult() view returns(bytes)
func (_ReentrantToken *ReentrantTokenCaller) LastReentryResult(opts *bind.CallOpts) ([]byte, error) {
	var out []interface{}
	err := _ReentrantToken.contract.Call(opts, &out, "lastReentryResult")

	if err != nil {
		return *new([]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([]byte)).(*[]byte)

	return out0, err

}

// LastReentryResult is a free data retrieval call binding the contract method 0xdebbfc77.
//
// Solidity: function lastReentryResult() view returns(bytes)
func (_ReentrantToken *ReentrantTokenSession) LastReentryResult() ([]byte, error) {
	return _ReentrantToken.Contract.LastReentryResult(&_ReentrantToken.CallOpts)
}

// LastReentryResult is a free data retrieval call binding the contract method 0xdebbfc77.
//
// Solidity: function lastReentryResult() view returns(bytes)
func (_ReentrantToken *ReentrantTokenCallerSession) LastReentryResult() ([]byte, error) {
	return _ReentrantToken.Contract.LastReentryResult(&_ReentrantToken.CallOpts)
}

// LastReentrySucceeded is a free data retrieval call binding the contract method 0x995b1eba.
//
// Solidity: function lastReentrySucceeded() view returns(bool)
func (_ReentrantToken *ReentrantTokenCaller) LastReentrySucceeded(opts *bind.CallOpts) (bool, error) {
	var out []interface{}
	err := _ReentrantToken.contract.Call(opts, &out, "lastReentrySucceeded")

	if err != nil {
		return *new(bool), err
	}

	out0 := *abi.ConvertType(out[0], new(bool)).(*bool)

	return out0, err

}

// LastReentrySucceeded is a free data retrieval call binding the contract method 0x995b1eba.
//
// Solidity: function lastReentrySucceeded() view returns(bool)
func (_ReentrantToken *ReentrantTokenSession) LastReentrySucceeded() (bool, error) {
	return _ReentrantToken.Contract.LastReentrySucceeded(&_ReentrantToken.CallOpts)
}

// LastReentrySucceeded is a free data retrieval call binding the contract method 0x995b1eba.
//
// Solidity: function lastReentrySucceeded() view returns(bool)
func (_ReentrantToken *ReentrantTokenCallerSession) LastReentrySucceeded() (bool, error) {
	return _ReentrantToken.Contract.LastReentrySucceeded(&_ReentrantToken.CallOpts)
}

// ReentryData is a free data retrieval call binding the contract method 0xb36ae5e6.
//
// Solidity: function reentryData() view returns(bytes)
func (_ReentrantToken *ReentrantTokenCaller) ReentryData(opts *bind.CallOpts) ([]byte, error) {
	var out []interface{}
	err := _ReentrantToken.contract.Call(opts, &out, "reentryData")

	if err != nil {
		return *new([]byte), err
	}

	out0 := *abi.ConvertType(out[0], new([]byte)).(*[]byte)

	return out0, err

}

// ReentryData is a free data retrieval call binding the contract method 0xb36ae5e6.
//
// Solidity: function reentryData() view returns(bytes)
func (_ReentrantToken *ReentrantTokenSession) ReentryData() ([]byte, error) {
	return _ReentrantToken.Contract.ReentryData(&_ReentrantToken.CallOpts)
}

// ReentryData is a free data retrieval call binding the contract method 0xb36ae5e6.
//
// Solidity: function reentryData() view returns(bytes)
func (_ReentrantToken *ReentrantTokenCallerSession) ReentryData() ([]byte, error) {
	return _ReentrantToken.Contract.ReentryData(&_ReentrantToken.CallOpts)
}

// ReentryTarget is a free data retrieval call binding the contract method 0xeb9d77f9.
//
// Solidity: function reentryTarget() view returns(address)
func (_ReentrantToken *ReentrantTokenCaller) ReentryTarget(opts *bind.CallOpts) (common.Address, error) {
	var out []interface{}
	err := _ReentrantToken.contract.Call(opts, &out, "reentryTarget")

	if err != nil {
		return *new(common.Address), err
	}

	out0 := *abi.ConvertType(out[0], new(common.Address)).(*common.Address)

	return out0, err

}

// ReentryTarget is a free data retrieval call binding the contract method 0xeb9d77f9.
//
// Solidity: function reentryTarget() view returns(address)
func (_ReentrantToken *ReentrantTokenSession) ReentryTarget() (common.Address, error) {
	return _ReentrantToken.Contract.ReentryTarget(&_ReentrantToken.CallOpts)
}

// ReentryTarget is a free data retrieval call binding the contract method 0xeb9d77f9.
//
// Solidity: function reentryTarget() view returns(address)
func (_ReentrantToken *ReentrantTokenCallerSession) ReentryTarget() (common.Address, error) {
	return _ReentrantToken.Contract.ReentryTarget(&_ReentrantToken.CallOpts)
}

// Approve is a paid mutator transaction binding the contract method 0x095ea7b3.
//
// Solidity: function approve(address spender, uint256 value) returns(bool)
func (_ReentrantToken *ReentrantTokenTransactor) Approve(opts *bind.TransactOpts, spender common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.contract.Transact(opts, "approve", spender, value)
}

// Approve is a paid mutator transaction binding the contract method 0x095ea7b3.
//
// Solidity: function approve(address spender, uint256 value) returns(bool)
func (_ReentrantToken *ReentrantTokenSession) Approve(spender common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.Contract.Approve(&_ReentrantToken.TransactOpts, spender, value)
}

// Approve is a paid mutator transaction binding the contract method 0x095ea7b3.
//
// Solidity: function approve(address spender, uint256 value) returns(bool)
func (_ReentrantToken *ReentrantTokenTransactorSession) Approve(spender common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.Contract.Approve(&_ReentrantToken.TransactOpts, spender, value)
}

// Mint is a paid mutator transaction binding the contract method 0x40c10f19.
//
// Solidity: function mint(address to, uint256 value) returns()
func (_ReentrantToken *ReentrantTokenTransactor) Mint(opts *bind.TransactOpts, to common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.contract.Transact(opts, "mint", to, value)
}

// Mint is a paid mutator transaction binding the contract method 0x40c10f19.
//
// Solidity: function mint(address to, uint256 value) returns()
func (_ReentrantToken *ReentrantTokenSession) Mint(to common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.Contract.Mint(&_ReentrantToken.TransactOpts, to, value)
}

// Mint is a paid mutator transaction binding the contract method 0x40c10f19.
//
// Solidity: function mint(address to, uint256 value) returns()
func (_ReentrantToken *ReentrantTokenTransactorSession) Mint(to common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.Contract.Mint(&_ReentrantToken.TransactOpts, to, value)
}

// SetReentry is a paid mutator transaction binding the contract method 0x58f63fb8.
//
// Solidity: function setReentry(address target, bytes data) returns()
func (_ReentrantToken *ReentrantTokenTransactor) SetReentry(opts *bind.TransactOpts, target common.Address, data []byte) (*types.Transaction, error) {
	return _ReentrantToken.contract.Transact(opts, "setReentry", target, data)
}

// SetReentry is a paid mutator transaction binding the contract method 0x58f63fb8.
//
// Solidity: function setReentry(address target, bytes data) returns()
func (_ReentrantToken *ReentrantTokenSession) SetReentry(target common.Address, data []byte) (*types.Transaction, error) {
	return _ReentrantToken.Contract.SetReentry(&_ReentrantToken.TransactOpts, target, data)
}

// SetReentry is a paid mutator transaction binding the contract method 0x58f63fb8.
//
// Solidity: function setReentry(address target, bytes data) returns()
func (_ReentrantToken *ReentrantTokenTransactorSession) SetReentry(target common.Address, data []byte) (*types.Transaction, error) {
	return _ReentrantToken.Contract.SetReentry(&_ReentrantToken.TransactOpts, target, data)
}

// TransferFrom is a paid mutator transaction binding the contract method 0x23b872dd.
//
// Solidity: function transferFrom(address from, address to, uint256 value) returns(bool)
func (_ReentrantToken *ReentrantTokenTransactor) TransferFrom(opts *bind.TransactOpts, from common.Address, to common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.contract.Transact(opts, "transferFrom", from, to, value)
}

// TransferFrom is a paid mutator transaction binding the contract method 0x23b872dd.
//
// Solidity: function transferFrom(address from, address to, uint256 value) returns(bool)
func (_ReentrantToken *ReentrantTokenSession) TransferFrom(from common.Address, to common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.Contract.TransferFrom(&_ReentrantToken.TransactOpts, from, to, value)
}

// TransferFrom is a paid mutator transaction binding the contract method 0x23b872dd.
//
// Solidity: function transferFrom(address from, address to, uint256 value) returns(bool)
func (_ReentrantToken *ReentrantTokenTransactorSession) TransferFrom(from common.Address, to common.Address, value *big.Int) (*types.Transaction, error) {
	return _ReentrantToken.Contract.TransferFrom(&_ReentrantToken.TransactOpts, from, to, value)
}

// ReentrantTokenApprovalIterator is returned from FilterApproval and is used to iterate over the raw logs and unpacked data for Approval events raised by the ReentrantToken contract.
type ReentrantTokenApprovalIterator struct {
	Event *ReentrantTokenApproval // Event containing the contract specifics and raw log

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
func (it *ReentrantTokenApprovalIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(ReentrantTokenApproval)
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
		it.Event = new(ReentrantTokenApproval)
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
func (it *ReentrantTokenApprovalIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *ReentrantTokenApprovalIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// ReentrantTokenApproval represents a Approval event raised by the ReentrantToken contract.
type ReentrantTokenApproval struct {
	Owner   common.Address
	Spender common.Address
	Value   *big.Int
	Raw     types.Log // Blockchain specific contextual infos
}

// FilterApproval is a free log retrieval operation binding the contract event 0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925.
//
// Solidity: event Approval(address indexed owner, address indexed spender, uint256 value)
func (_ReentrantToken *ReentrantTokenFilterer) FilterApproval(opts *bind.FilterOpts, owner []common.Address, spender []common.Address) (*ReentrantTokenApprovalIterator, error) {

	var ownerRule []interface{}
	for _, ownerItem := range owner {
		ownerRule = append(ownerRule, ownerItem)
	}
	var spenderRule []interface{}
	for _, spenderItem := range spender {
		spenderRule = append(spenderRule, spenderItem)
	}

	logs, sub, err := _ReentrantToken.contract.FilterLogs(opts, "Approval", ownerRule, spenderRule)
	if err != nil {
		return nil, err
	}
	return &ReentrantTokenApprovalIterator{contract: _ReentrantToken.contract, event: "Approval", logs: logs, sub: sub}, nil
}

// WatchApproval is a free log subscription operation binding the contract event 0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925.
//
// Solidity: event Approval(address indexed owner, address indexed spender, uint256 value)
func (_ReentrantToken *ReentrantTokenFilterer) WatchApproval(opts *bind.WatchOpts, sink chan<- *ReentrantTokenApproval, owner []common.Address, spender []common.Address) (event.Subscription, error) {

	var ownerRule []interface{}
	for _, ownerItem := range owner {
		ownerRule = append(ownerRule, ownerItem)
	}
	var spenderRule []interface{}
	for _, spenderItem := range spender {
		spenderRule = append(spenderRule, spenderItem)
	}

	logs, sub, err := _ReentrantToken.contract.WatchLogs(opts, "Approval", ownerRule, spenderRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(ReentrantTokenApproval)
				if err := _ReentrantToken.contract.UnpackLog(event, "Approval", log); err != nil {
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

// ParseApproval is a log parse operation binding the contract event 0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925.
//
// Solidity: event Approval(address indexed owner, address indexed spender, uint256 value)
func (_ReentrantToken *ReentrantTokenFilterer) ParseApproval(log types.Log) (*ReentrantTokenApproval, error) {
	event := new(ReentrantTokenApproval)
	if err := _ReentrantToken.contract.UnpackLog(event, "Approval", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}

// ReentrantTokenTransferIterator is returned from FilterTransfer and is used to iterate over the raw logs and unpacked data for Transfer events raised by the ReentrantToken contract.
type ReentrantTokenTransferIterator struct {
	Event *ReentrantTokenTransfer // Event containing the contract specifics and raw log

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
func (it *ReentrantTokenTransferIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(ReentrantTokenTransfer)
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
		it.Event = new(ReentrantTokenTransfer)
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
func (it *ReentrantTokenTransferIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *ReentrantTokenTransferIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// ReentrantTokenTransfer represents a Transfer event raised by the ReentrantToken contract.
type ReentrantTokenTransfer struct {
	From  common.Address
	To    common.Address
	Value *big.Int
	Raw   types.Log // Blockchain specific contextual infos
}

// FilterTransfer is a free log retrieval operation binding the contract event 0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef.
//
// Solidity: event Transfer(address indexed from, address indexed to, uint256 value)
func (_ReentrantToken *ReentrantTokenFilterer) FilterTransfer(opts *bind.FilterOpts, from []common.Address, to []common.Address) (*ReentrantTokenTransferIterator, error) {

	var fromRule []interface{}
	for _, fromItem := range from {
		fromRule = append(fromRule, fromItem)
	}
	var toRule []interface{}
	for _, toItem := range to {
		toRule = append(toRule, toItem)
	}

	logs, sub, err := _ReentrantToken.contract.FilterLogs(opts, "Transfer", fromRule, toRule)
	if err != nil {
		return nil, err
	}
	return &ReentrantTokenTransferIterator{contract: _ReentrantToken.contract, event: "Transfer", logs: logs, sub: sub}, nil
}

// WatchTransfer is a free log subscription operation binding the contract event 0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef.
//
// Solidity: event Transfer(address indexed from, address indexed to, uint256 value)
func (_ReentrantToken *ReentrantTokenFilterer) WatchTransfer(opts *bind.WatchOpts, sink chan<- *ReentrantTokenTransfer, from []common.Address, to []common.Address) (event.Subscription, error) {

	var fromRule []interface{}
	for _, fromItem := range from {
		fromRule = append(fromRule, fromItem)
	}
	var toRule []interface{}
	for _, toItem := range to {
		toRule = append(toRule, toItem)
	}

	logs, sub, err := _ReentrantToken.contract.WatchLogs(opts, "Transfer", fromRule, toRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(ReentrantTokenTransfer)
				if err := _ReentrantToken.contract.UnpackLog(event, "Transfer", log); err != nil {
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

// ParseTransfer is a log parse operation binding the contract event 0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef.
//
// Solidity: event Transfer(address indexed from, address indexed to, uint256 value)
func (_ReentrantToken *ReentrantTokenFilterer) ParseTransfer(log types.Log) (*ReentrantTokenTransfer, error) {
	event := new(ReentrantTokenTransfer)
	if err := _ReentrantToken.contract.UnpackLog(event, "Transfer", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}
