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

// ReceiptLogAnchorMetaData contains all meta data concerning the ReceiptLogAnchor contract.
var ReceiptLogAnchorMetaData = &bind.MetaData{
	ABI: "[{\"anonymous\":false,\"inputs\":[{\"indexed\":true,\"internalType\":\"address\",\"name\":\"by\",\"type\":\"address\"},{\"indexed\":true,\"internalType\":\"uint64\",\"name\":\"size\",\"type\":\"uint64\"},{\"indexed\":false,\"internalType\":\"bytes32\",\"name\":\"root\",\"type\":\"bytes32\"}],\"name\":\"Anchored\",\"type\":\"event\"},{\"inputs\":[{\"internalType\":\"uint64\",\"name\":\"size\",\"type\":\"uint64\"},{\"internalType\":\"bytes32\",\"name\":\"root\",\"type\":\"bytes32\"}],\"name\":\"anchor\",\"outputs\":[],\"stateMutability\":\"nonpayable\",\"type\":\"function\"}]",
	Bin: "0x6080604052348015600e575f5ffd5b5060ea8061001b5f395ff3fe6080604052348015600e575f5ffd5b50600436106026575f3560e01c8063a685520814602a575b5f5ffd5b603960353660046080565b603b565b005b60405181815267ffffffffffffffff83169033907f0cd48d2f0de2b26babeaa563bc19f67e7b14bb998edeaabe4592e8b4472dda6b9060200160405180910390a35050565b5f5f604083850312156090575f5ffd5b823567ffffffffffffffff8116811460a6575f5ffd5b94602093909301359350505056fea26469706673582212204610e13d041a86a582aa76b9f4d745e7a54bd202c240035c34150c1cbdaf7bc064736f6c634300081c0033",
}

// ReceiptLogAnchorABI is the input ABI used to generate the binding from.
// Deprecated: Use ReceiptLogAnchorMetaData.ABI instead.
var ReceiptLogAnchorABI = ReceiptLogAnchorMetaData.ABI

// ReceiptLogAnchorBin is the compiled bytecode used for deploying new contracts.
// Deprecated: Use ReceiptLogAnchorMetaData.Bin instead.
var ReceiptLogAnchorBin = ReceiptLogAnchorMetaData.Bin

// DeployReceiptLogAnchor deploys a new Ethereum contract, binding an instance of ReceiptLogAnchor to it.
func DeployReceiptLogAnchor(auth *bind.TransactOpts, backend bind.ContractBackend) (common.Address, *types.Transaction, *ReceiptLogAnchor, error) {
	parsed, err := ReceiptLogAnchorMetaData.GetAbi()
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	if parsed == nil {
		return common.Address{}, nil, nil, errors.New("GetABI returned nil")
	}

	address, tx, contract, err := bind.DeployContract(auth, *parsed, common.FromHex(ReceiptLogAnchorBin), backend)
	if err != nil {
		return common.Address{}, nil, nil, err
	}
	return address, tx, &ReceiptLogAnchor{ReceiptLogAnchorCaller: ReceiptLogAnchorCaller{contract: contract}, ReceiptLogAnchorTransactor: ReceiptLogAnchorTransactor{contract: contract}, ReceiptLogAnchorFilterer: ReceiptLogAnchorFilterer{contract: contract}}, nil
}

// ReceiptLogAnchor is an auto generated Go binding around an Ethereum contract.
type ReceiptLogAnchor struct {
	ReceiptLogAnchorCaller     // Read-only binding to the contract
	ReceiptLogAnchorTransactor // Write-only binding to the contract
	ReceiptLogAnchorFilterer   // Log filterer for contract events
}

// ReceiptLogAnchorCaller is an auto generated read-only Go binding around an Ethereum contract.
type ReceiptLogAnchorCaller struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ReceiptLogAnchorTransactor is an auto generated write-only Go binding around an Ethereum contract.
type ReceiptLogAnchorTransactor struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ReceiptLogAnchorFilterer is an auto generated log filtering Go binding around an Ethereum contract events.
type ReceiptLogAnchorFilterer struct {
	contract *bind.BoundContract // Generic contract wrapper for the low level calls
}

// ReceiptLogAnchorSession is an auto generated Go binding around an Ethereum contract,
// with pre-set call and transact options.
type ReceiptLogAnchorSession struct {
	Contract     *ReceiptLogAnchor // Generic contract binding to set the session for
	CallOpts     bind.CallOpts     // Call options to use throughout this session
	TransactOpts bind.TransactOpts // Transaction auth options to use throughout this session
}

// ReceiptLogAnchorCallerSession is an auto generated read-only Go binding around an Ethereum contract,
// with pre-set call options.
type ReceiptLogAnchorCallerSession struct {
	Contract *ReceiptLogAnchorCaller // Generic contract caller binding to set the session for
	CallOpts bind.CallOpts           // Call options to use throughout this session
}

// ReceiptLogAnchorTransactorSession is an auto generated write-only Go binding around an Ethereum contract,
// with pre-set transact options.
type ReceiptLogAnchorTransactorSession struct {
	Contract     *ReceiptLogAnchorTransactor // Generic contract transactor binding to set the session for
	TransactOpts bind.TransactOpts           // Transaction auth options to use throughout this session
}

// ReceiptLogAnchorRaw is an auto generated low-level Go binding around an Ethereum contract.
type ReceiptLogAnchorRaw struct {
	Contract *ReceiptLogAnchor // Generic contract binding to access the raw methods on
}

// ReceiptLogAnchorCallerRaw is an auto generated low-level read-only Go binding around an Ethereum contract.
type ReceiptLogAnchorCallerRaw struct {
	Contract *ReceiptLogAnchorCaller // Generic read-only contract binding to access the raw methods on
}

// ReceiptLogAnchorTransactorRaw is an auto generated low-level write-only Go binding around an Ethereum contract.
type ReceiptLogAnchorTransactorRaw struct {
	Contract *ReceiptLogAnchorTransactor // Generic write-only contract binding to access the raw methods on
}

// NewReceiptLogAnchor creates a new instance of ReceiptLogAnchor, bound to a specific deployed contract.
func NewReceiptLogAnchor(address common.Address, backend bind.ContractBackend) (*ReceiptLogAnchor, error) {
	contract, err := bindReceiptLogAnchor(address, backend, backend, backend)
	if err != nil {
		return nil, err
	}
	return &ReceiptLogAnchor{ReceiptLogAnchorCaller: ReceiptLogAnchorCaller{contract: contract}, ReceiptLogAnchorTransactor: ReceiptLogAnchorTransactor{contract: contract}, ReceiptLogAnchorFilterer: ReceiptLogAnchorFilterer{contract: contract}}, nil
}

// NewReceiptLogAnchorCaller creates a new read-only instance of ReceiptLogAnchor, bound to a specific deployed contract.
func NewReceiptLogAnchorCaller(address common.Address, caller bind.ContractCaller) (*ReceiptLogAnchorCaller, error) {
	contract, err := bindReceiptLogAnchor(address, caller, nil, nil)
	if err != nil {
		return nil, err
	}
	return &ReceiptLogAnchorCaller{contract: contract}, nil
}

// NewReceiptLogAnchorTransactor creates a new write-only instance of ReceiptLogAnchor, bound to a specific deployed contract.
func NewReceiptLogAnchorTransactor(address common.Address, transactor bind.ContractTransactor) (*ReceiptLogAnchorTransactor, error) {
	contract, err := bindReceiptLogAnchor(address, nil, transactor, nil)
	if err != nil {
		return nil, err
	}
	return &ReceiptLogAnchorTransactor{contract: contract}, nil
}

// NewReceiptLogAnchorFilterer creates a new log filterer instance of ReceiptLogAnchor, bound to a specific deployed contract.
func NewReceiptLogAnchorFilterer(address common.Address, filterer bind.ContractFilterer) (*ReceiptLogAnchorFilterer, error) {
	contract, err := bindReceiptLogAnchor(address, nil, nil, filterer)
	if err != nil {
		return nil, err
	}
	return &ReceiptLogAnchorFilterer{contract: contract}, nil
}

// bindReceiptLogAnchor binds a generic wrapper to an already deployed contract.
func bindReceiptLogAnchor(address common.Address, caller bind.ContractCaller, transactor bind.ContractTransactor, filterer bind.ContractFilterer) (*bind.BoundContract, error) {
	parsed, err := ReceiptLogAnchorMetaData.GetAbi()
	if err != nil {
		return nil, err
	}
	return bind.NewBoundContract(address, *parsed, caller, transactor, filterer), nil
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_ReceiptLogAnchor *ReceiptLogAnchorRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _ReceiptLogAnchor.Contract.ReceiptLogAnchorCaller.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_ReceiptLogAnchor *ReceiptLogAnchorRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ReceiptLogAnchor.Contract.ReceiptLogAnchorTransactor.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_ReceiptLogAnchor *ReceiptLogAnchorRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _ReceiptLogAnchor.Contract.ReceiptLogAnchorTransactor.contract.Transact(opts, method, params...)
}

// Call invokes the (constant) contract method with params as input values and
// sets the output to result. The result type might be a single field for simple
// returns, a slice of interfaces for anonymous returns and a struct for named
// returns.
func (_ReceiptLogAnchor *ReceiptLogAnchorCallerRaw) Call(opts *bind.CallOpts, result *[]interface{}, method string, params ...interface{}) error {
	return _ReceiptLogAnchor.Contract.contract.Call(opts, result, method, params...)
}

// Transfer initiates a plain transaction to move funds to the contract, calling
// its default method if one is available.
func (_ReceiptLogAnchor *ReceiptLogAnchorTransactorRaw) Transfer(opts *bind.TransactOpts) (*types.Transaction, error) {
	return _ReceiptLogAnchor.Contract.contract.Transfer(opts)
}

// Transact invokes the (paid) contract method with params as input values.
func (_ReceiptLogAnchor *ReceiptLogAnchorTransactorRaw) Transact(opts *bind.TransactOpts, method string, params ...interface{}) (*types.Transaction, error) {
	return _ReceiptLogAnchor.Contract.contract.Transact(opts, method, params...)
}

// Anchor is a paid mutator transaction binding the contract method 0xa6855208.
//
// Solidity: function anchor(uint64 size, bytes32 root) returns()
func (_ReceiptLogAnchor *ReceiptLogAnchorTransactor) Anchor(opts *bind.TransactOpts, size uint64, root [32]byte) (*types.Transaction, error) {
	return _ReceiptLogAnchor.contract.Transact(opts, "anchor", size, root)
}

// Anchor is a paid mutator transaction binding the contract method 0xa6855208.
//
// Solidity: function anchor(uint64 size, bytes32 root) returns()
func (_ReceiptLogAnchor *ReceiptLogAnchorSession) Anchor(size uint64, root [32]byte) (*types.Transaction, error) {
	return _ReceiptLogAnchor.Contract.Anchor(&_ReceiptLogAnchor.TransactOpts, size, root)
}

// Anchor is a paid mutator transaction binding the contract method 0xa6855208.
//
// Solidity: function anchor(uint64 size, bytes32 root) returns()
func (_ReceiptLogAnchor *ReceiptLogAnchorTransactorSession) Anchor(size uint64, root [32]byte) (*types.Transaction, error) {
	return _ReceiptLogAnchor.Contract.Anchor(&_ReceiptLogAnchor.TransactOpts, size, root)
}

// ReceiptLogAnchorAnchoredIterator is returned from FilterAnchored and is used to iterate over the raw logs and unpacked data for Anchored events raised by the ReceiptLogAnchor contract.
type ReceiptLogAnchorAnchoredIterator struct {
	Event *ReceiptLogAnchorAnchored // Event containing the contract specifics and raw log

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
func (it *ReceiptLogAnchorAnchoredIterator) Next() bool {
	// If the iterator failed, stop iterating
	if it.fail != nil {
		return false
	}
	// If the iterator completed, deliver directly whatever's available
	if it.done {
		select {
		case log := <-it.logs:
			it.Event = new(ReceiptLogAnchorAnchored)
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
		it.Event = new(ReceiptLogAnchorAnchored)
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
func (it *ReceiptLogAnchorAnchoredIterator) Error() error {
	return it.fail
}

// Close terminates the iteration process, releasing any pending underlying
// resources.
func (it *ReceiptLogAnchorAnchoredIterator) Close() error {
	it.sub.Unsubscribe()
	return nil
}

// ReceiptLogAnchorAnchored represents a Anchored event raised by the ReceiptLogAnchor contract.
type ReceiptLogAnchorAnchored struct {
	By   common.Address
	Size uint64
	Root [32]byte
	Raw  types.Log // Blockchain specific contextual infos
}

// FilterAnchored is a free log retrieval operation binding the contract event 0x0cd48d2f0de2b26babeaa563bc19f67e7b14bb998edeaabe4592e8b4472dda6b.
//
// Solidity: event Anchored(address indexed by, uint64 indexed size, bytes32 root)
func (_ReceiptLogAnchor *ReceiptLogAnchorFilterer) FilterAnchored(opts *bind.FilterOpts, by []common.Address, size []uint64) (*ReceiptLogAnchorAnchoredIterator, error) {

	var byRule []interface{}
	for _, byItem := range by {
		byRule = append(byRule, byItem)
	}
	var sizeRule []interface{}
	for _, sizeItem := range size {
		sizeRule = append(sizeRule, sizeItem)
	}

	logs, sub, err := _ReceiptLogAnchor.contract.FilterLogs(opts, "Anchored", byRule, sizeRule)
	if err != nil {
		return nil, err
	}
	return &ReceiptLogAnchorAnchoredIterator{contract: _ReceiptLogAnchor.contract, event: "Anchored", logs: logs, sub: sub}, nil
}

// WatchAnchored is a free log subscription operation binding the contract event 0x0cd48d2f0de2b26babeaa563bc19f67e7b14bb998edeaabe4592e8b4472dda6b.
//
// Solidity: event Anchored(address indexed by, uint64 indexed size, bytes32 root)
func (_ReceiptLogAnchor *ReceiptLogAnchorFilterer) WatchAnchored(opts *bind.WatchOpts, sink chan<- *ReceiptLogAnchorAnchored, by []common.Address, size []uint64) (event.Subscription, error) {

	var byRule []interface{}
	for _, byItem := range by {
		byRule = append(byRule, byItem)
	}
	var sizeRule []interface{}
	for _, sizeItem := range size {
		sizeRule = append(sizeRule, sizeItem)
	}

	logs, sub, err := _ReceiptLogAnchor.contract.WatchLogs(opts, "Anchored", byRule, sizeRule)
	if err != nil {
		return nil, err
	}
	return event.NewSubscription(func(quit <-chan struct{}) error {
		defer sub.Unsubscribe()
		for {
			select {
			case log := <-logs:
				// New log arrived, parse the event and forward to the user
				event := new(ReceiptLogAnchorAnchored)
				if err := _ReceiptLogAnchor.contract.UnpackLog(event, "Anchored", log); err != nil {
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

// ParseAnchored is a log parse operation binding the contract event 0x0cd48d2f0de2b26babeaa563bc19f67e7b14bb998edeaabe4592e8b4472dda6b.
//
// Solidity: event Anchored(address indexed by, uint64 indexed size, bytes32 root)
func (_ReceiptLogAnchor *ReceiptLogAnchorFilterer) ParseAnchored(log types.Log) (*ReceiptLogAnchorAnchored, error) {
	event := new(ReceiptLogAnchorAnchored)
	if err := _ReceiptLogAnchor.contract.UnpackLog(event, "Anchored", log); err != nil {
		return nil, err
	}
	event.Raw = log
	return event, nil
}
