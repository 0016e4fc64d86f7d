package contracts

import (
	"bytes"
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
)

// The canonical addresses of the contracts that x402's Permit2 schemes call.
// They are the same on every chain: Permit2 and the proxies were deployed with
// CREATE2, and the official clients and facilitators have them built in, so a
// local chain must have the code at exactly these addresses.
const (
	// Permit2AddressHex is Uniswap Permit2's address.
	Permit2AddressHex = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
	// UptoProxyAddressHex is x402UptoPermit2Proxy's address, the spender of
	// every "upto" payment.
	UptoProxyAddressHex = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"
)

var (
	// Permit2Address is Permit2AddressHex as an address.
	Permit2Address = common.HexToAddress(Permit2AddressHex)
	// UptoProxyAddress is UptoProxyAddressHex as an address.
	UptoProxyAddress = common.HexToAddress(UptoProxyAddressHex)
)

// CanonicalCode returns the runtime code to place at each canonical address:
// our Permit2 and X402UptoPermit2Proxy. Neither needs a constructor or storage
// set up, so the code alone makes a working contract. The map is fresh; the
// caller may change it.
func CanonicalCode() map[common.Address][]byte {
	return map[common.Address][]byte{
		Permit2Address:   common.FromHex(Permit2RuntimeBin),
		UptoProxyAddress: common.FromHex(X402UptoPermit2ProxyRuntimeBin),
	}
}

// AddCanonicalAlloc adds the canonical contracts to a genesis alloc, for
// go-ethereum's simulated backend or any chain started from a genesis. It
// panics if alloc already holds one of the addresses: that is a programming
// error, and silently replacing an account would hide it.
func AddCanonicalAlloc(alloc types.GenesisAlloc) {
	for addr, code := range CanonicalCode() {
		if _, ok := alloc[addr]; ok {
			panic(fmt.Sprintf("contracts: genesis alloc already has %s", addr))
		}
		alloc[addr] = types.Account{Code: code, Balance: new(big.Int)}
	}
}

// RPCCaller is the raw JSON-RPC client InstallCanonical needs; *rpc.Client
// is one.
type RPCCaller interface {
	CallContext(ctx context.Context, result any, method string, args ...any) error
}

// InstallCanonical places the canonical contracts on a running dev node with
// anvil_setCode (anvil; hardhat names it hardhat_setCode and is not tried),
// then reads the code back to make sure the node kept it. A node without
// anvil_setCode, a production node for one, gets an error that says so.
func InstallCanonical(ctx context.Context, c RPCCaller) error {
	code := CanonicalCode()
	for _, k := range []struct {
		name string
		addr common.Address
	}{{"Permit2", Permit2Address}, {"X402UptoPermit2Proxy", UptoProxyAddress}} {
		want := code[k.addr]
		if err := c.CallContext(ctx, nil, "anvil_setCode", k.addr, hexutil.Bytes(want)); err != nil {
			return fmt.Errorf("place %s at %s with anvil_setCode (the node must be a dev node such as anvil): %w", k.name, k.addr, err)
		}
		var got hexutil.Bytes
		if err := c.CallContext(ctx, &got, "eth_getCode", k.addr, "latest"); err != nil {
			return fmt.Errorf("read back %s at %s: %w", k.name, k.addr, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s at %s: the node holds %d bytes of code after anvil_setCode, want our %d", k.name, k.addr, len(got), len(want))
		}
	}
	return nil
}
