package testchain

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/llm4agents/llm4agents/contracts"
)

// requireToolsEnv names the environment variable that turns a missing anvil binary
// from a skipped test into a failed one (set in CI).
const requireToolsEnv = "LLM4AGENTS_TEST_REQUIRE_TOOLS"

// anvilChainID is the chain id an anvil started by StartAnvil uses (unless
// WithChainID), the same as the simulated backend's.
const anvilChainID = 1337

const (
	anvilStartTimeout = 20 * time.Second // until eth_chainId answers
	anvilStopTimeout  = 5 * time.Second  // from SIGKILL until the process is reaped
	anvilStartTries   = 3                // another process may take the free port first
)

// Anvil is a running anvil node owned by one test. StartAnvil registers a cleanup
// that stops it, so tests only call Close to take the node down early (to test
// what happens when the node goes away).
//
// The node's ten default accounts are funded with 10,000 ETH each and belong to
// the standard test mnemonic, the keys DevKey(0) to DevKey(9). Permit2 and the
// x402 upto proxy are at contracts.Permit2Address and contracts.UptoProxyAddress
// (placed with anvil_setCode, so no dev account's nonce moved), unless the node
// was started WithBareChain.
type Anvil struct {
	// URL is the node's HTTP JSON-RPC endpoint, on 127.0.0.1.
	URL string
	// RPC is a raw JSON-RPC client for the node, for anvil_* and evm_* methods.
	RPC *rpc.Client
	// Client is an ethclient over RPC.
	Client *ethclient.Client
	// ChainID is the node's chain id, 1337 unless started WithChainID.
	ChainID *big.Int

	cmd       *exec.Cmd
	exited    chan struct{} // closed once cmd.Wait returned
	output    *bytes.Buffer // stdout and stderr; read only after exited is closed
	closeOnce sync.Once
	closeErr  error
}

// AnvilOption changes how StartAnvil starts the node.
type AnvilOption func(*anvilConfig)

type anvilConfig struct {
	noMining bool
	bare     bool
	chainID  int64 // 0: anvilChainID
}

// WithChainID starts the node with chain id id instead of 1337, for tests of
// a gateway paid on two chains.
func WithChainID(id int64) AnvilOption {
	return func(c *anvilConfig) { c.chainID = id }
}

// WithBareChain leaves out Permit2 and the upto proxy, for tests of code that
// places them itself.
func WithBareChain() AnvilOption {
	return func(c *anvilConfig) { c.bare = true }
}

// WithNoMining starts the node with automine off: transactions stay in the pool
// until Mine is called or automine is turned back on with SetAutomine.
func WithNoMining() AnvilOption {
	return func(c *anvilConfig) { c.noMining = true }
}

// StartAnvil starts an anvil node on a free loopback port and waits until it
// answers eth_chainId. The node is killed when the test ends.
//
// The binary is the one pinned in interop/package.json, found from the module
// root. When it is missing the test is skipped, or fails if
// LLM4AGENTS_TEST_REQUIRE_TOOLS=1.
func StartAnvil(tb testing.TB, opts ...AnvilOption) *Anvil {
	tb.Helper()
	var cfg anvilConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	bin, err := anvilPath()
	if err != nil {
		if os.Getenv(requireToolsEnv) == "1" {
			tb.Fatalf("anvil: %v", err)
		}
		tb.Skipf("anvil: %v (run npm ci in interop/; set %s=1 to fail instead)", err, requireToolsEnv)
	}

	for try := 1; ; try++ {
		a, err := startAnvil(bin, cfg)
		if err == nil {
			tb.Cleanup(func() {
				if err := a.Close(); err != nil {
					tb.Errorf("stop anvil: %v", err)
				}
			})
			return a
		}
		if try == anvilStartTries {
			tb.Fatalf("start anvil: %v", err)
		}
		tb.Logf("start anvil (try %d): %v", try, err)
	}
}

func startAnvil(bin string, cfg anvilConfig) (*Anvil, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	chainID := cmp.Or(cfg.chainID, anvilChainID)
	args := []string{
		"--host", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--chain-id", strconv.FormatInt(chainID, 10),
		"--silent",
	}
	if cfg.noMining {
		args = append(args, "--no-mining")
	}

	a := &Anvil{
		URL:     "http://127.0.0.1:" + strconv.Itoa(port),
		ChainID: big.NewInt(chainID),
		exited:  make(chan struct{}),
		output:  new(bytes.Buffer),
	}
	// The process outlives any request context: it is stopped by Close.
	a.cmd = exec.CommandContext(context.Background(), bin, args...) // #nosec G204 -- bin is the anvil binary anvilPath found in our interop/node_modules
	a.cmd.Stdout = a.output
	a.cmd.Stderr = a.output
	a.cmd.SysProcAttr = killWithParent()
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	go func() {
		_ = a.cmd.Wait() // the exit status of a killed node says nothing useful
		close(a.exited)
	}()

	if err := a.waitReady(); err != nil {
		_ = a.Close() // the readiness error is the one to report
		return nil, err
	}
	if !cfg.bare {
		ctx, cancel := context.WithTimeout(context.Background(), anvilStartTimeout)
		defer cancel()
		if err := contracts.InstallCanonical(ctx, a.RPC); err != nil {
			_ = a.Close() // the install error is the one to report
			return nil, err
		}
	}
	return a, nil
}

// waitReady polls eth_chainId until the node answers, the process exits, or
// anvilStartTimeout passes.
func (a *Anvil) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), anvilStartTimeout)
	defer cancel()
	c, err := rpc.DialContext(ctx, a.URL)
	if err != nil {
		return fmt.Errorf("dial %s: %w", a.URL, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var id hexutil.Big
		callCtx, callCancel := context.WithTimeout(ctx, time.Second)
		err := c.CallContext(callCtx, &id, "eth_chainId")
		callCancel()
		if err == nil {
			if id.ToInt().Cmp(a.ChainID) != 0 {
				c.Close()
				return fmt.Errorf("anvil at %s reports chain id %s, want %s", a.URL, id.ToInt(), a.ChainID)
			}
			a.RPC = c
			a.Client = ethclient.NewClient(c)
			return nil
		}
		select {
		case <-a.exited:
			c.Close()
			return fmt.Errorf("anvil exited before answering: %s: %s", a.cmd.ProcessState, bytes.TrimSpace(a.output.Bytes()))
		case <-ctx.Done():
			c.Close()
			return fmt.Errorf("anvil at %s not ready after %s: %w", a.URL, anvilStartTimeout, err)
		case <-tick.C:
		}
	}
}

// Close kills the node and waits for the process to exit. It is safe to call
// more than once; the test's cleanup calls it too.
func (a *Anvil) Close() error {
	a.closeOnce.Do(func() {
		if a.RPC != nil {
			a.RPC.Close() // also closes Client, which wraps it
		}
		if err := a.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			a.closeErr = fmt.Errorf("kill anvil: %w", err)
		}
		select {
		case <-a.exited:
		case <-time.After(anvilStopTimeout):
			a.closeErr = fmt.Errorf("anvil pid %d still running %s after kill", a.cmd.Process.Pid, anvilStopTimeout)
		}
	})
	return a.closeErr
}

// SetAutomine turns mining of every incoming transaction on or off
// (evm_setAutomine).
func (a *Anvil) SetAutomine(ctx context.Context, on bool) error {
	if err := a.RPC.CallContext(ctx, nil, "evm_setAutomine", on); err != nil {
		return fmt.Errorf("evm_setAutomine %t: %w", on, err)
	}
	return nil
}

// Mine mines n blocks now (anvil_mine), including pending transactions that fit.
func (a *Anvil) Mine(ctx context.Context, n int) error {
	if n < 1 {
		return fmt.Errorf("anvil_mine: block count %d, want at least 1", n)
	}
	if err := a.RPC.CallContext(ctx, nil, "anvil_mine", hexutil.Uint64(n)); err != nil {
		return fmt.Errorf("anvil_mine %d: %w", n, err)
	}
	return nil
}

// DropTransaction removes a transaction from the node's pool
// (anvil_dropTransaction), as a node that evicted it would. It is an error if the
// pool did not hold the transaction.
func (a *Anvil) DropTransaction(ctx context.Context, hash common.Hash) error {
	var dropped *common.Hash
	if err := a.RPC.CallContext(ctx, &dropped, "anvil_dropTransaction", hash); err != nil {
		return fmt.Errorf("anvil_dropTransaction %s: %w", hash, err)
	}
	if dropped == nil {
		return fmt.Errorf("anvil_dropTransaction %s: not in the pool", hash)
	}
	return nil
}

// SetBalance sets the balance of addr to wei (anvil_setBalance).
func (a *Anvil) SetBalance(ctx context.Context, addr common.Address, wei *big.Int) error {
	if err := a.RPC.CallContext(ctx, nil, "anvil_setBalance", addr, (*hexutil.Big)(wei)); err != nil {
		return fmt.Errorf("anvil_setBalance %s: %w", addr, err)
	}
	return nil
}

// SetNextBaseFee sets the base fee per gas of the next block
// (anvil_setNextBlockBaseFeePerGas), to make transactions underpriced.
func (a *Anvil) SetNextBaseFee(ctx context.Context, wei *big.Int) error {
	if err := a.RPC.CallContext(ctx, nil, "anvil_setNextBlockBaseFeePerGas", (*hexutil.Big)(wei)); err != nil {
		return fmt.Errorf("anvil_setNextBlockBaseFeePerGas %s: %w", wei, err)
	}
	return nil
}

// anvilPath returns the anvil binary that npm installed under interop/ for this
// platform.
func anvilPath() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	// npm's platform packages use Go's names except for Windows (win32, anvil.exe).
	goos, exe := runtime.GOOS, "anvil"
	if goos == "windows" {
		goos, exe = "win32", "anvil.exe"
	}
	pkg := "anvil-" + goos + "-" + runtime.GOARCH
	bin := filepath.Join(root, "interop", "node_modules", "@foundry-rs", pkg, "bin", exe)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no anvil binary: %w", err)
	}
	return bin, nil
}

// moduleRoot walks up from the working directory (a test runs in its package
// directory) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// freePort asks the kernel for a free loopback port. The port is released before
// anvil binds it, so another process can take it in between; StartAnvil retries.
func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}
