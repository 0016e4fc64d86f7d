package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/llm4agents/llm4agents/contracts"
)

// logDeployAnchor is `llm4agents log deploy-anchor`: it deploys this
// release's ReceiptLogAnchor on any network, the contract log.anchor.contract
// names (devnet does it on a dev node).
func logDeployAnchor(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("log deploy-anchor", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "usage: llm4agents log deploy-anchor --rpc URL --yes [--key-file FILE]\n\n"+
			"Deploys this release's ReceiptLogAnchor contract, to which a gateway with log.anchor writes\n"+
			"its receipt log's checkpoints, and prints its address for log.anchor.contract. It sends one\n"+
			"transaction from the wallet's account, which pays its gas; --yes says to send it. Anyone may\n"+
			"deploy it: the contract only records who anchored what, and log audit checks the sender the\n"+
			"gateway publishes.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var rpcURL, keyFile string
	var yes bool
	var timeout time.Duration
	fs.StringVar(&rpcURL, "rpc", "", "JSON-RPC URL of a node of the network to deploy on (required)")
	fs.StringVar(&keyFile, "key-file", "", "file holding the deploying wallet's hex private key (or set "+walletKeyEnv+"; never a flag value)")
	fs.BoolVar(&yes, "yes", false, "send the deployment (it costs gas); without it nothing is sent")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "how long sending and waiting for the deployment may take")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New("log deploy-anchor: takes no arguments, only flags")
	case rpcURL == "":
		return errors.New("log deploy-anchor: --rpc is required")
	case timeout <= 0:
		return errors.New("log deploy-anchor: --timeout must be positive")
	}
	key, err := loadWallet(keyFile, e.getenv, e.stderr)
	if err != nil {
		return fmt.Errorf("log deploy-anchor: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ec, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		return fmt.Errorf("log deploy-anchor: --rpc: %w", redactURL(err, rpcURL))
	}
	defer ec.Close()
	if err := deployAnchor(ctx, ec, key, yes, e); err != nil {
		return fmt.Errorf("log deploy-anchor: %w", redactURL(err, rpcURL))
	}
	return nil
}

// deployAnchor says what it will send, and sends it when yes, then checks
// the code the chain holds at the new address is this release's.
func deployAnchor(ctx context.Context, ec *ethclient.Client, key *ecdsa.PrivateKey, yes bool, e env) error {
	chainID, err := ec.ChainID(ctx)
	if err != nil {
		return fmt.Errorf("chain id: %w", err)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	printf(e.stderr, "deploy ReceiptLogAnchor:\n  network  eip155:%s\n  from     %s (pays the gas)\n", chainID, from.Hex())
	if !yes {
		return errors.New("pass --yes to send the deployment; nothing was sent")
	}
	auth, err := bind.NewKeyedTransactorWithChainID(key, chainID)
	if err != nil {
		return fmt.Errorf("transactor: %w", err)
	}
	auth.Context = ctx
	addr, tx, _, err := contracts.DeployReceiptLogAnchor(auth, ec)
	if err != nil {
		return fmt.Errorf("send the deployment: %w", err)
	}
	printf(e.stderr, "sent transaction %s; waiting for it to be mined\n", tx.Hash().Hex())
	r, err := bind.WaitMined(ctx, ec, tx)
	switch {
	case err != nil:
		return fmt.Errorf("transaction %s: %w", tx.Hash().Hex(), err)
	case r.Status != types.ReceiptStatusSuccessful:
		return fmt.Errorf("transaction %s reverted; nothing was deployed", tx.Hash().Hex())
	}
	code, err := ec.CodeAt(ctx, addr, nil)
	switch {
	case err != nil:
		return fmt.Errorf("read the code at %s: %w", addr.Hex(), err)
	case !bytes.Equal(code, common.FromHex(contracts.ReceiptLogAnchorRuntimeBin)):
		return fmt.Errorf("the code at %s is not this release's ReceiptLogAnchor", addr.Hex())
	}
	printf(e.stdout, "deployed ReceiptLogAnchor at %s on eip155:%s in transaction %s, block %d\n"+
		"set it as log.anchor.contract; give log audit --from-block %d\n", addr.Hex(), chainID, tx.Hash().Hex(), r.BlockNumber, r.BlockNumber)
	return nil
}
