package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/ethereum/go-ethereum/common"
	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// runReceipts is `llm4agents receipts verify`.
func runReceipts(ctx context.Context, args []string, e env) error {
	return runSubcommand(ctx, "receipts", args, e, []subcommand{
		{"verify", "check that the gateway's signed receipts are in its public log, and the log consistent", receiptsVerify},
	})
}

// runLog is `llm4agents log audit|keygen|reconcile|deploy-anchor`.
func runLog(ctx context.Context, args []string, e env) error {
	return runSubcommand(ctx, "log", args, e, []subcommand{
		{"audit", "walk a gateway's whole receipt log, check it, and print the totals it shows", logAudit},
		{"keygen", "write a new checkpoint key for a gateway's receipt log (log.key_file)", logKeygen},
		{"reconcile", "check from the store that each account's credit receipts, ledger and log agree", logReconcile},
		{"deploy-anchor", "deploy the ReceiptLogAnchor contract log.anchor.contract names, on any network", logDeployAnchor},
	})
}

// verifyResult is one receipt as receipts verify found it.
type verifyResult struct {
	RequestID string `json:"requestId"`
	Amount    string `json:"amount,omitempty"`
	Index     *int64 `json:"index,omitempty"`
	Included  bool   `json:"included"`
	Error     string `json:"error,omitempty"`
}

func receiptsVerify(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("receipts verify", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "usage: llm4agents receipts verify --url URL [--request-id ID | --all] [flags]\n\n"+
			"Checks your receipts against the gateway's public receipt log: each receipt's signature, its\n"+
			"inclusion proof against a checkpoint signed by the log key the gateway publishes, and that\n"+
			"every checkpoint seen extends the earlier ones. A receipt not yet in the log is waited for until\n"+
			"its logBy (within --timeout). Exits 0 only if every receipt is included and the log consistent.\n"+
			"Signed in with the wallet it checks the account's receipts; with an API key, that key's.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var f accountFlags
	f.register(fs, true, true)
	fs.StringVar(&f.gateway, "url", "", "the gateway's URL (same as --gateway)")
	var apiKeyFile, id string
	var all bool
	fs.StringVar(&apiKeyFile, "api-key-file", "", "file holding an sk-l4a- API key to ask with instead of signing in (or set "+apiKeyEnv+")")
	fs.StringVar(&id, "request-id", "", "one receipt, by its request id (0x and 64 hex digits)")
	fs.BoolVar(&all, "all", false, "every receipt the account (or the API key) has")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New("receipts verify: takes no arguments, only flags")
	case (id == "") == !all:
		return errors.New("receipts verify: give --request-id ID or --all")
	case id != "" && (!isToken(id) || strings.ContainsAny(id, "/?#%") || len(id) > 80):
		return errors.New("receipts verify: --request-id is not a request id")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := authorized(ctx, &f, apiKeyFile, e)
	if err != nil {
		return fmt.Errorf("receipts verify: %w", err)
	}
	envelopes, err := receiptEnvelopes(ctx, a, id)
	if err != nil {
		return fmt.Errorf("receipts verify: %w", err)
	}
	sigs := newReceiptVerifier(f.timeout)
	lg := &client.ReceiptLog{Account: a}
	results := make([]verifyResult, len(envelopes))
	var mu sync.Mutex
	auditor := &client.ReceiptAuditor{Log: lg, Grace: 500 * time.Millisecond, Report: func(r client.AuditResult) {
		mu.Lock()
		defer mu.Unlock()
		for i := range results {
			if results[i].RequestID == r.RequestID && results[i].Error == "" {
				results[i].Included = r.Err == nil
				if r.Err != nil {
					results[i].Error = r.Err.Error()
				}
			}
		}
	}}
	for i, env := range envelopes {
		res := verifyEnvelope(ctx, sigs, f.base, env)
		// The auditor's reports of earlier receipts read results meanwhile.
		mu.Lock()
		results[i].RequestID = "?"
		if res.r != nil {
			results[i].RequestID, results[i].Amount = res.r.RequestID.Hex(), res.r.Amount.String()
		}
		if !res.Verified {
			results[i].Error = "signature: " + res.Error
		}
		mu.Unlock()
		if res.Verified {
			auditor.Add(ctx, res.r, res.r.RequestID.Hex())
		}
	}
	auditor.Wait()
	// The latest checkpoint too: it must extend every one the proofs were
	// against.
	cp, cpErr := lg.Checkpoint(ctx)
	bad := 0
	for _, r := range results {
		if !r.Included {
			bad++
		}
	}
	if f.json {
		out := map[string]any{"data": results, "included": len(results) - bad, "failed": bad}
		if cpErr == nil {
			out["checkpoint"] = map[string]any{"origin": cp.Origin, "size": cp.Size}
		} else {
			out["checkpointError"] = cpErr.Error()
		}
		writeJSON(e.stdout, out)
	} else {
		for _, r := range results {
			if r.Included {
				printf(e.stdout, "included  %s  amount %s\n", r.RequestID, r.Amount)
			} else {
				printf(e.stdout, "NOT VERIFIED  %s: %s\n", r.RequestID, oneLine(r.Error, 300))
			}
		}
		if cpErr == nil {
			printf(e.stdout, "log %s: %d receipts, consistent with every checkpoint seen\n", cp.Origin, cp.Size)
		}
	}
	switch {
	case cpErr != nil:
		return fmt.Errorf("receipts verify: the log's latest checkpoint: %w", cpErr)
	case bad > 0:
		for _, r := range results {
			if !r.Included {
				return fmt.Errorf("receipts verify: %d of %d receipts not verified; the first: %s: %s", bad, len(results), r.RequestID, oneLine(r.Error, 300))
			}
		}
	case len(results) == 0:
		printf(e.stderr, "no receipts\n")
	}
	return nil
}

// receiptEnvelopes fetches one receipt, or every receipt a sees, page by
// page.
func receiptEnvelopes(ctx context.Context, a *client.Account, id string) ([]json.RawMessage, error) {
	if id != "" {
		raw, err := a.Receipt(ctx, id)
		if err != nil {
			return nil, err
		}
		return []json.RawMessage{raw}, nil
	}
	var out []json.RawMessage
	var before int64
	for {
		page, next, err := a.ReceiptsPage(ctx, maxReceiptsLimit, "", before)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next <= 0 || next >= before && before > 0 {
			return out, nil // the last page, or a cursor that does not move
		}
		before = next
	}
}

// auditTotal is what the log shows of one rail and model.
type auditTotal struct {
	Rail         string `json:"rail"`
	Model        string `json:"model"`
	Receipts     int64  `json:"receipts"`
	Amount       string `json:"amount"`
	InputTokens  string `json:"inputTokens"`
	OutputTokens string `json:"outputTokens"`

	amount, in, out *big.Int
}

func logAudit(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("log audit", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "usage: llm4agents log audit --url URL [--rpc URL] [flags]\n\n"+
			"Walks the gateway's whole public receipt log: verifies its checkpoint against the published key,\n"+
			"reads every leaf from its tiles and checks each against the tree, checks the checkpoint against\n"+
			"the one of an earlier audit (--since), and prints the totals the leaves show per rail and model.\n"+
			"A leaf shows no payer, key or request id. If the gateway anchors its log on chain, each anchor it\n"+
			"lists must be the log's own root at its size, and with --rpc its transaction must carry the\n"+
			"Anchored event from the published sender at the published contract; with --rpc, every anchor\n"+
			"the sender wrote on chain (from --from-block on), listed or not, must be the log's own root too.\n"+
			"Exits 0 only if everything checks.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var f accountFlags
	f.register(fs, false, true)
	fs.StringVar(&f.gateway, "url", "", "the gateway's URL (same as --gateway)")
	var since, rpcURL string
	fs.StringVar(&since, "since", "", "a checkpoint an earlier audit printed (its three lines, \\n-separated, or a file with them): the log must extend it")
	fs.StringVar(&rpcURL, "rpc", "", "JSON-RPC URL of a node of the anchors' network, to check each anchor's transaction on chain (without it the chain is not consulted)")
	var fromBlock uint64
	fs.Uint64Var(&fromBlock, "from-block", 0, "with --rpc: the first block to read the anchor contract's events from (its deployment block saves queries)")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("log audit: takes no arguments, only flags")
	}
	if err := f.check(e.getenv); err != nil {
		return fmt.Errorf("log audit: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	lg := &client.ReceiptLog{Account: newAccount(&f)}
	if since != "" {
		text, err := readCheckpointArg(since)
		if err != nil {
			return fmt.Errorf("log audit: --since: %w", err)
		}
		old, err := receipt.ParseCheckpoint(text)
		if err != nil {
			return fmt.Errorf("log audit: --since: %w", err)
		}
		if err := lg.Observe(ctx, old); err != nil {
			return fmt.Errorf("log audit: --since: %w", err)
		}
	}
	cp, err := lg.Checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("log audit: %w", err)
	}
	totals := map[[2]string]*auditTotal{}
	unreadable := 0
	const page = 256 * 16
	for from := int64(0); from < cp.Size; from += page {
		leaves, err := lg.Leaves(ctx, cp, from, min(from+page, cp.Size))
		if err != nil {
			return fmt.Errorf("log audit: leaves from %d: %w", from, err)
		}
		for _, b := range leaves {
			l, err := receipt.ParseLeaf(b)
			if err != nil {
				unreadable++
				continue
			}
			k := [2]string{l.Rail, l.Model}
			t := totals[k]
			if t == nil {
				t = &auditTotal{Rail: l.Rail, Model: l.Model, amount: new(big.Int), in: new(big.Int), out: new(big.Int)}
				totals[k] = t
			}
			t.Receipts++
			t.amount.Add(t.amount, l.Amount)
			t.in.Add(t.in, l.InputTokens)
			t.out.Add(t.out, l.OutputTokens)
		}
	}
	list := make([]*auditTotal, 0, len(totals))
	for _, t := range totals {
		t.Amount, t.InputTokens, t.OutputTokens = t.amount.String(), t.in.String(), t.out.String()
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Rail != list[j].Rail {
			return list[i].Rail < list[j].Rail
		}
		return list[i].Model < list[j].Model
	})
	anchors, anchorErr := auditAnchors(ctx, lg, rpcURL, fromBlock)
	if f.json {
		out := map[string]any{"origin": cp.Origin, "size": cp.Size, "checkpoint": cp.Text(),
			"totals": list, "unreadable": unreadable, "anchored": anchors != nil}
		if anchors != nil {
			out["anchors"], out["chainConsulted"] = anchors.Listed, rpcURL != ""
			if anchors.Chain != nil {
				out["chainAnchors"] = anchors.Chain
			}
		}
		writeJSON(e.stdout, out)
	} else {
		printf(e.stdout, "log %s: %d receipts, every leaf checked against the signed tree\n", cp.Origin, cp.Size)
		for _, t := range list {
			printf(e.stdout, "  %-8s %-24s %8d receipts  amount %s (%s)  tokens in %s out %s\n", t.Rail, oneLine(t.Model, 24), t.Receipts,
				t.Amount, formatAmount(t.amount, f.decimals), t.InputTokens, t.OutputTokens)
		}
		printAnchors(e, anchors, rpcURL != "")
		printf(e.stdout, "checkpoint (give it to the next audit as --since):\n%s", cp.Text())
	}
	switch {
	case unreadable > 0:
		return fmt.Errorf("log audit: %d leaves are not receipt leaves", unreadable)
	case anchorErr != nil:
		return fmt.Errorf("log audit: %w", anchorErr)
	}
	return nil
}

// auditedAnchor is one anchor as log audit found it.
type auditedAnchor struct {
	Size        int64  `json:"size"`
	Root        string `json:"root"`
	Transaction string `json:"transaction"`
	Block       uint64 `json:"block,omitempty"`
	// OnChain: the node showed the transaction mined with its event.
	OnChain bool   `json:"onChain"`
	Error   string `json:"error,omitempty"`
}

// anchorAudit is what log audit found of the log's anchors: the ones the
// gateway lists and, with a node, every one on chain.
type anchorAudit struct {
	Listed []auditedAnchor
	Chain  *chainAudit
}

// chainAudit is every anchor the chain holds from the published sender, in
// blocks From to To, checked against the log (client.CheckChainAnchors).
type chainAudit struct {
	From    uint64          `json:"fromBlock"`
	To      uint64          `json:"toBlock"`
	Anchors int             `json:"anchors"`
	Failed  []auditedAnchor `json:"failed,omitempty"`
}

// auditAnchors checks the anchors the gateway lists (client.CheckAnchors),
// and with rpcURL set, against the chain, together with every anchor the
// chain holds from block from on (client.CheckChainAnchors). A gateway that
// does not anchor its log gives nil and no error.
func auditAnchors(ctx context.Context, lg *client.ReceiptLog, rpcURL string, from uint64) (*anchorAudit, error) {
	var node interface {
		client.ChainReceipts
		client.ChainLogs
	}
	if rpcURL != "" {
		wk, err := lg.WellKnown(ctx)
		if err != nil {
			return nil, err
		}
		if !wk.Log.Anchored() {
			return nil, nil
		}
		ec, err := dialNode(ctx, rpcURL)
		if err != nil {
			return nil, fmt.Errorf("--rpc: %w", redactURL(err, rpcURL))
		}
		defer ec.Close()
		id, err := ec.ChainID(ctx)
		if err != nil {
			return nil, fmt.Errorf("--rpc: %w", redactURL(err, rpcURL))
		}
		if want := "eip155:" + id.String(); want != wk.Log.Network {
			return nil, fmt.Errorf("--rpc: the node is on %s, the anchors on %s", want, wk.Log.Network)
		}
		node = ec
	}
	var listedNode client.ChainReceipts
	if node != nil {
		listedNode = node
	}
	_, checks, err := lg.CheckAnchors(ctx, listedNode)
	if errors.Is(err, client.ErrNotAnchored) {
		return nil, nil
	}
	if err != nil && checks == nil {
		return nil, fmt.Errorf("the log's anchors: %w", err)
	}
	audited := func(c client.AnchorCheck) auditedAnchor {
		a := auditedAnchor{Size: c.Anchor.Size, Root: fmt.Sprintf("0x%x", c.Anchor.Root[:]), Transaction: c.Anchor.Transaction.Hex(),
			Block: c.Block, OnChain: c.OnChain}
		if c.Err != nil {
			a.Error = redactURL(c.Err, rpcURL).Error()
		}
		return a
	}
	out := &anchorAudit{Listed: make([]auditedAnchor, len(checks))}
	for i, c := range checks {
		out.Listed[i] = audited(c)
	}
	if node != nil {
		_, chainChecks, head, chainErr := lg.CheckChainAnchors(ctx, node, from)
		if chainErr != nil && chainChecks == nil {
			return out, fmt.Errorf("the anchors on chain: %w", redactURL(chainErr, rpcURL))
		}
		out.Chain = &chainAudit{From: from, To: head, Anchors: len(chainChecks)}
		for _, c := range chainChecks {
			if c.Err != nil {
				out.Chain.Failed = append(out.Chain.Failed, audited(c))
			}
		}
		if err == nil && chainErr != nil {
			err = chainErr
		}
	}
	if err != nil {
		err = redactURL(err, rpcURL)
	}
	return out, err
}

// printAnchors prints what auditAnchors found: nil is a log not anchored.
func printAnchors(e env, audit *anchorAudit, chainConsulted bool) {
	if audit == nil {
		printf(e.stdout, "the log is not anchored on chain\n")
		return
	}
	if c := audit.Chain; c != nil {
		printf(e.stdout, "anchors on chain from the published sender, blocks %d to %d: %d, %d not the log's own root\n", c.From, c.To, c.Anchors, len(c.Failed))
		for _, a := range c.Failed {
			printf(e.stdout, "  size %d  root %s  transaction %s  block %d  FAILED: %s\n", a.Size, a.Root, a.Transaction, a.Block, oneLine(a.Error, 300))
		}
	}
	anchors := audit.Listed
	if len(anchors) == 0 {
		printf(e.stdout, "anchors listed: none yet\n")
		return
	}
	printf(e.stdout, "anchors, newest first:\n")
	for _, a := range anchors {
		state := "root is the log's"
		switch {
		case a.Error != "":
			state = "FAILED: " + oneLine(a.Error, 300)
		case a.OnChain:
			state = fmt.Sprintf("root is the log's; on chain in block %d", a.Block)
		case chainConsulted:
			state = "root is the log's; not mined yet"
		}
		printf(e.stdout, "  size %d  root %s  transaction %s  %s\n", a.Size, a.Root, a.Transaction, state)
	}
	if !chainConsulted {
		printf(e.stdout, "the chain was not consulted: the anchors were checked against the log's tiles only (give --rpc URL)\n")
	}
}

// readCheckpointArg reads --since: the checkpoint's text, with literal \n
// between its lines, or a file holding it.
func readCheckpointArg(s string) (string, error) {
	if strings.Contains(s, `\n`) {
		text := strings.ReplaceAll(s, `\n`, "\n")
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		return text, nil
	}
	b, err := readCapped(s, receipt.MaxCheckpointBytes)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// logKeygen writes a new signed-note private key for log.key_file, named
// for the log's origin, and prints its public key.
func logKeygen(_ context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("log keygen", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var origin, out string
	fs.StringVar(&origin, "origin", "", "the log's origin, the first line of its checkpoints: the gateway's host and a path, such as gw.example.com/receipts")
	fs.StringVar(&out, "out", "", "file to write the private key to (created with mode 0600; never overwritten)")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New("log keygen: takes no arguments, only flags")
	case origin == "" || out == "":
		return errors.New("log keygen: --origin and --out are required")
	case !validOrigin(origin):
		return errors.New("log keygen: --origin must be printable, without spaces or '+', such as gw.example.com/receipts")
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		return fmt.Errorf("log keygen: %w", err)
	}
	fh, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: the operator names the file to create.
	if err != nil {
		return fmt.Errorf("log keygen: %w", err)
	}
	if _, err := fmt.Fprintln(fh, skey); err != nil {
		_ = fh.Close()
		return fmt.Errorf("log keygen: write %s: %w", out, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("log keygen: write %s: %w", out, err)
	}
	printf(e.stdout, "%s\n", vkey)
	printf(e.stderr, "wrote the private key to %s; set log.key_file to it on every replica. The line above is the public key buyers verify with.\n", out)
	return nil
}

// validOrigin reports whether s can name a log: 1 to 200 bytes of printable
// ASCII, no space and no '+' (a signed-note key name's separator).
func validOrigin(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || c == '+' {
			return false
		}
	}
	return true
}

// reconcileStore is what log reconcile reads: the ledger, the receipts and
// the log's entries.
type reconcileStore interface {
	store.Ledger
	store.Receipts
	receiptlog.EntryReader
}

// logReconcile checks, from the store a serve config names, that each
// account's credit receipts add up to what the ledger captured from it and
// that each receipt is the leaf the log holds for it.
func logReconcile(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("log reconcile", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	path := fs.String("config", "", "the gateway's YAML config (its store, network and credits)")
	var accounts mintFlags
	fs.Var(&accounts, "account", "a credit account (0x address) to check; repeat for several")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New("log reconcile: takes no arguments, only flags")
	case *path == "" || len(accounts) == 0:
		return errors.New("log reconcile: --config and at least one --account are required")
	}
	addrs := make([]common.Address, len(accounts))
	for i, a := range accounts {
		if addrs[i], err = exact.ParseAddress(a); err != nil {
			return fmt.Errorf("log reconcile: --account %q: %w", oneLine(a, 60), err)
		}
	}
	data, err := readCapped(*path, 1<<20)
	if err != nil {
		return fmt.Errorf("log reconcile: %w", err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return fmt.Errorf("log reconcile: %s:\n%w", *path, err)
	}
	if !cfg.Credits.Enabled {
		return errors.New("log reconcile: the config has no credits: there is no ledger to reconcile")
	}
	quiet := slog.New(slog.DiscardHandler)
	db, err := openStore(ctx, cfg.Store, e.getenv, quiet)
	if err != nil {
		return fmt.Errorf("log reconcile: %w", err)
	}
	defer func() { _ = db.Close() }() // read only
	rs, ok := db.(reconcileStore)
	if !ok {
		return errors.New("log reconcile: the store holds no ledger (use the gateway's sqlite:// or postgres:// store)")
	}
	asset, err := cfg.Network.AssetAddress()
	if err != nil {
		return fmt.Errorf("log reconcile: %w", err)
	}
	led, err := ledger.New(rs, ledger.Config{Asset: ledger.AssetID(cfg.Network.ID, asset)}, quiet)
	if err != nil {
		return fmt.Errorf("log reconcile: %w", err)
	}
	chainID, err := cfg.ReceiptChainID()
	if err != nil {
		return fmt.Errorf("log reconcile: %w", err)
	}
	bad := 0
	for _, a := range addrs {
		r, err := receiptlog.Reconcile(ctx, led, rs, rs, receipt.NewDomain(chainID), a)
		if err != nil {
			return fmt.Errorf("log reconcile: %w", err)
		}
		state := "ok"
		if !r.OK() {
			state, bad = "MISMATCH", bad+1
		}
		printf(e.stdout, "%s  %s: ledger captured %s, credit receipts say %s; %d receipts, %d in the log, %d queued\n",
			state, a.Hex(), r.Captured, r.Receipted, r.Receipts, r.Logged, r.Pending)
		for _, p := range r.Problems {
			printf(e.stdout, "    %s\n", oneLine(p, 300))
		}
	}
	if bad > 0 {
		return fmt.Errorf("log reconcile: %d of %d accounts do not reconcile", bad, len(addrs))
	}
	return nil
}
