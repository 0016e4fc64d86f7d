package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/devchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Roles of the dev accounts in the demo.
const (
	demoBuyer       = 1
	demoFacilitator = 8
	demoPayTo       = 9
)

// runDemo runs the product on embedded defaults: a local chain with a USDC-like
// token, the gateway with its in-process facilitator, a temporary SQLite store
// and the demo model, and a buyer that pays for one completion and one stream.
// With --serve it then keeps the gateway up at a fixed loopback address, with
// the buyer's wallet key in a file, so the README's `pay` and `chat` examples
// can be pasted against it.
func runDemo(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	verbose := fs.Bool("v", false, "log what the gateway and facilitator do")
	serveAddr := fs.String("serve", "", "after the walkthrough, keep serving at this loopback `address` (e.g. 127.0.0.1:8402) until interrupted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	}
	listenAddr := "127.0.0.1:0"
	if *serveAddr != "" {
		if err := loopbackAddr(*serveAddr); err != nil {
			return fmt.Errorf("demo: --serve: %w", err)
		}
		listenAddr = *serveAddr
	}
	logOut := io.Discard
	if *verbose {
		logOut = e.stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	out := e.stdout

	printf(out, "llm4agents demo: everything runs on this machine; no real money moves.\n")
	c, err := devchain.Start(ctx, 50*time.Millisecond, log)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // a simulated chain: nothing outlives the demo
	buyer, payTo := devchain.Address(demoBuyer), devchain.Address(demoPayTo)
	if err := c.Mint(ctx, buyer, big.NewInt(10_000_000)); err != nil {
		return err
	}
	// The one approval an upto buyer gives (wallet approve-permit2).
	if err := c.ApprovePermit2(ctx, demoBuyer, big.NewInt(1_000_000)); err != nil {
		return err
	}
	printf(out, "1. local chain %s, test USDC (EIP-3009) at %s; the buyer %s holds 10.00 USDC and approved Permit2 for 1.00 (for upto)\n", devchain.Network, c.Token.Hex(), buyer.Hex())

	dir, err := os.MkdirTemp("", "llm4agents-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: it is a temporary directory
	cfg := config.Demo()
	cfg.Network.Asset, cfg.Network.PayTo = c.Token.Hex(), payTo.Hex()
	cfg.Log.Anchor.Contract = c.Anchor.Hex()
	// upto beside exact, with no minimum charge: on the local chain a
	// settlement costs nothing, and the metered price shows.
	cfg.Network.Schemes = []string{config.SchemeExact, config.SchemeUpto}
	cfg.Network.Upto.MinCharge = "0"
	cfg.Store.DSN = "sqlite://" + filepath.Join(dir, "demo.db")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return err
	}
	cfg.PublicURL = "http://" + ln.Addr().String()
	if err := cfg.Validate(); err != nil {
		_ = ln.Close() // never served: nothing to lose
		return fmt.Errorf("demo config: %w", err)
	}
	parts, err := buildGateway(ctx, cfg, c.Client, devchain.Key(demoFacilitator), e.getenv, log)
	if err != nil {
		_ = ln.Close() // never served: nothing to lose
		return err
	}
	defer parts.close()
	srvCtx, stopSrv := context.WithCancel(ctx)
	srvDone := make(chan struct{}) // closed once the server stopped and srvErr is set
	var srvErr error
	go func() {
		defer close(srvDone)
		srvErr = serve(srvCtx, ln, parts.server, 5*time.Second)
	}()
	defer func() {
		stopSrv()
		<-srvDone
		if srvErr != nil {
			log.Warn("gateway stopped", "err", srvErr)
		}
	}()
	printf(out, "2. the gateway is serving on %s with the demo model (a built-in fake, not a real LLM)\n", cfg.PublicURL)

	// Steps 4 and 5 pay the 402's first offer, exact; step 6 prefers upto.
	tr := &client.Transport{
		Signer: exact.NewKeySigner(devchain.Key(demoBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
			Assets: []client.Asset{{Network: devchain.Network, Address: c.Token.Hex()}},
			Upto:   client.UptoAsOffered,
		},
	}
	buyerHTTP := &http.Client{Transport: tr, Timeout: time.Minute}
	url := cfg.PublicURL + "/v1/chat/completions"

	// An unpaid call shows the price.
	body := `{"model":"demo","messages":[{"role":"user","content":"What does x402 do?"}],"max_tokens":64}`
	resp, err := post(ctx, http.DefaultClient, url, body)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		return fmt.Errorf("the unpaid call got %d without a usable 402: %w", resp.StatusCode, err)
	}
	printf(out, "3. unpaid call: %d Payment Required, %s atomic units (%s USDC) to %s, valid %ds\n",
		resp.StatusCode, pr.Accepts[0].Amount, usdc(mustAmount(pr.Accepts[0].Amount)), pr.Accepts[0].PayTo, pr.Accepts[0].MaxTimeoutSeconds)

	before, err := c.BalanceOf(ctx, payTo)
	if err != nil {
		return err
	}
	resp, err = post(ctx, buyerHTTP, url, body)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // after reading it in full, a close error changes nothing
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the paid call got %d: %s", resp.StatusCode, b)
	}
	sr, err := client.SettleResponse(resp)
	if err != nil {
		return err
	}
	var comp struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &comp); err != nil || len(comp.Choices) == 0 {
		return fmt.Errorf("the paid call answered something that is not a completion: %s", b)
	}
	after, err := c.BalanceOf(ctx, payTo)
	if err != nil {
		return err
	}
	printf(out, "4. paid call: 200, settled in transaction %s\n   answer: %q\n   usage: %d prompt + %d completion tokens; the seller's balance went %s -> %s USDC\n",
		sr.Transaction, shorten(comp.Choices[0].Message.Content, 80), comp.Usage.PromptTokens, comp.Usage.CompletionTokens, usdc(before), usdc(after))

	// A stream: settled after the first content chunk, before the first byte.
	resp, err = post(ctx, buyerHTTP, url, `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Stream a short answer."}],"max_tokens":48}`)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("the paid stream got %d: %s", resp.StatusCode, b)
	}
	sr, err = client.SettleResponse(resp)
	if err != nil {
		return err
	}
	printf(out, "5. paid stream: settled in transaction %s before the first byte; streaming:\n   ", sr.Transaction)
	var text strings.Builder
	var usageLine string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &ch) != nil {
			continue
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			printf(out, "%s", c.Delta.Content)
		}
		if ch.Usage != nil {
			usageLine = fmt.Sprintf("%d prompt + %d completion tokens", ch.Usage.PromptTokens, ch.Usage.CompletionTokens)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if text.Len() == 0 || usageLine == "" {
		return errors.New("the stream carried no content or no usage")
	}
	printf(out, "\n   usage: %s\n", usageLine)
	if err := demoUpto(ctx, out, c.Token, url); err != nil {
		return err
	}
	if err := demoCredits(ctx, out, cfg.PublicURL, c.Token, c.Client); err != nil {
		return err
	}
	final, err := c.BalanceOf(ctx, payTo)
	if err != nil {
		return err
	}
	left, err := c.BalanceOf(ctx, buyer)
	if err != nil {
		return err
	}
	printf(out, "9. the buyer paid %s USDC in all; the seller holds %s USDC. done.\n", usdc(new(big.Int).Sub(big.NewInt(10_000_000), left)), usdc(final))
	if *serveAddr == "" {
		return nil
	}
	stopped, err := keepServing(ctx, out, cfg.PublicURL, c.Token, srvDone)
	if err != nil {
		return err
	}
	if stopped { // srvDone is closed, so srvErr is set
		if srvErr == nil {
			return errors.New("demo: the gateway stopped")
		}
		return fmt.Errorf("demo: the gateway stopped: %w", srvErr)
	}
	return nil
}

// demoUpto pays one call with upto, as the buyer's client prefers when the
// 402 offers it: the permit authorizes the quote, the gateway settles what the
// call used.
func demoUpto(ctx context.Context, out io.Writer, token common.Address, url string) error {
	tr := &client.Transport{
		Signer: exact.NewKeySigner(devchain.Key(demoBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
			Assets: []client.Asset{{Network: devchain.Network, Address: token.Hex()}},
		},
	}
	body := `{"model":"demo","messages":[{"role":"user","content":"Answer in a few words."}],"max_tokens":4096}`
	resp, err := post(ctx, &http.Client{Transport: tr, Timeout: time.Minute}, url, body)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // after reading it in full, a close error changes nothing
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the upto call got %d: %s", resp.StatusCode, b)
	}
	var comp struct {
		X struct {
			Charged     string `json:"charged"`
			Maximum     string `json:"maximum"`
			Transaction string `json:"transaction"`
		} `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(b, &comp); err != nil || comp.X.Maximum == "" {
		return fmt.Errorf("the upto call answered without its charge: %s", b)
	}
	printf(out, "6. upto call: the buyer authorized up to %s USDC (the quote for 4096 tokens);\n   the call used fewer and paid %s USDC (the client counts %s), settled in transaction %s\n",
		usdc(mustAmount(comp.X.Maximum)), usdc(mustAmount(comp.X.Charged)), usdc(tr.Spent()), comp.X.Transaction)
	return nil
}

// demoCredits tops up the buyer's credit with an x402 payment, signs in
// with the wallet, makes an API key and pays one call from credit; then it
// checks that the call's signed receipt is in the gateway's public receipt
// log, once the log includes it (by the receipt's logBy), and that the log
// is anchored on chain (demoAnchor).
func demoCredits(ctx context.Context, out io.Writer, base string, token common.Address, node client.ChainReceipts) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	tr := &client.Transport{
		Signer: exact.NewKeySigner(devchain.Key(demoBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(100_000),
			Assets: []client.Asset{{Network: devchain.Network, Address: token.Hex()}},
		},
	}
	acct := &client.Account{Base: u, Client: &http.Client{Transport: tr, Timeout: time.Minute}}
	top, _, err := acct.TopUp(ctx, big.NewInt(100_000))
	if err != nil {
		return fmt.Errorf("top-up: %w", err)
	}
	if err := acct.SignIn(ctx, exact.NewKeySigner(devchain.Key(demoBuyer)), time.Now()); err != nil {
		return fmt.Errorf("sign-in: %w", err)
	}
	key, _, err := acct.CreateKey(ctx, &client.KeyRequest{Name: "demo"})
	if err != nil {
		return fmt.Errorf("create a key: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"Pay me from credit."}],"max_tokens":32}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key.Key)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // after reading it in full, a close error changes nothing
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the credit call got %d: %s", resp.StatusCode, b)
	}
	r, err := (&client.ReceiptVerifier{}).VerifyResponse(ctx, resp)
	if err != nil {
		return fmt.Errorf("the credit call's receipt: %w", err)
	}
	printf(out, "7. credits: the buyer topped up %s USDC (transaction %s), signed in with the wallet and made an API key;\n"+
		"   a call paid from credit was charged %s USDC, with a signed receipt (request %s)\n",
		usdc(mustAmount(top.Credited)), top.Transaction, usdc(r.Amount), r.RequestID.Hex())
	// The credit call's receipt is written with its charge, within a flush
	// interval of the answer (leased credits): asking for it by id waits
	// for it. Then, signed in, the buyer reads every receipt of its account:
	// the x402 payments', the top-up's and the credit call's.
	if _, err := acct.Receipt(ctx, r.RequestID.Hex()); err != nil {
		return fmt.Errorf("the credit call's receipt: %w", err)
	}
	envelopes, err := acct.Receipts(ctx, 100, "")
	if err != nil {
		return fmt.Errorf("the buyer's receipts: %w", err)
	}
	lg := &client.ReceiptLog{Account: acct}
	rails := map[string]int{}
	var c receipt.Checkpoint
	for _, env := range envelopes {
		r, _, err := receipt.ParseEnvelope(env)
		if err != nil {
			return err
		}
		if c, err = demoVerify(ctx, lg, r); err != nil {
			return fmt.Errorf("the receipt log, receipt %s: %w", r.RequestID.Hex(), err)
		}
		if r.Model == receipt.ModelTopUp {
			rails["topup"]++
			continue
		}
		rails[r.Rail]++
	}
	printf(out, "8. receipt log: all %d receipts of the buyer (exact %d, upto %d, credits %d, top-up %d) are in the public log\n"+
		"   %s (%d receipts), each inclusion proof checked against the checkpoint key the gateway\n"+
		"   publishes; a leaf shows no payer or key\n",
		len(envelopes), rails[receipt.RailExact], rails[receipt.RailUpto], rails[receipt.RailCredits], rails["topup"], c.Origin, c.Size)
	return demoAnchor(ctx, out, lg, c, node)
}

// demoVerify checks that the log includes r, waiting for it until its
// logBy.
func demoVerify(ctx context.Context, lg *client.ReceiptLog, r *receipt.Receipt) (receipt.Checkpoint, error) {
	for {
		c, err := lg.VerifyReceipt(ctx, r, r.RequestID.Hex())
		if !errors.Is(err, client.ErrNotLoggedYet) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return receipt.Checkpoint{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoAnchorWait bounds the wait for the anchor of the demo's log: the demo
// anchors every 2s, and its chain mines within a tenth of that.
const demoAnchorWait = 30 * time.Second

// demoAnchor waits for the gateway to anchor a checkpoint covering c on
// chain, and checks it as an auditor would: the anchor's transaction emitted
// the event from the sender and at the contract the gateway publishes, and
// the anchored root is the log's own at that size.
func demoAnchor(ctx context.Context, out io.Writer, lg *client.ReceiptLog, c receipt.Checkpoint, node client.ChainReceipts) error {
	ctx, cancel := context.WithTimeout(ctx, demoAnchorWait)
	defer cancel()
	for {
		_, checks, err := lg.CheckAnchors(ctx, node)
		if err != nil {
			return fmt.Errorf("the log's anchors: %w", err)
		}
		for _, a := range checks {
			if a.OnChain && a.Anchor.Size >= c.Size {
				printf(out, "   anchored on chain: size %d, root 0x%x, transaction %s\n", a.Anchor.Size, a.Anchor.Root[:], a.Anchor.Transaction.Hex())
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no anchor of the log's %d receipts on chain after %s: %w", c.Size, demoAnchorWait, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoKeyFile is where `demo --serve` leaves the buyer's wallet key, at a
// fixed path so that the README's commands can name it. The key is a public
// dev key of a simulated chain; the file is still written 0600 and removed
// when the demo stops.
func demoKeyFile() string { return filepath.Join(os.TempDir(), "llm4agents-demo", "buyer.key") }

// keepServing writes the buyer's key file, prints what to paste, and waits
// until ctx ends (Ctrl-C) or the server stops (srvDone closed: stopped).
func keepServing(ctx context.Context, out io.Writer, publicURL string, token common.Address, srvDone <-chan struct{}) (stopped bool, err error) {
	path := demoKeyFile()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("demo: key file directory: %w", err)
	}
	key := hex.EncodeToString(crypto.FromECDSA(devchain.Key(demoBuyer)))
	if err := os.WriteFile(path, []byte("0x"+key+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("demo: write the buyer's key file: %w", err)
	}
	defer func() { _ = os.Remove(path) }() // a dev key of a chain that ends with the demo
	// The demo token is no USDC the buyer's default policy knows: name it.
	asset := devchain.Network + "/" + token.Hex()
	printf(out, "10. still serving at %s until Ctrl-C; the buyer's wallet key (a dev key, worthless) is in %s. Try:\n", publicURL, path)
	printf(out, "   llm4agents pay --key-file %s --asset %s -d '{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' %s/v1/chat/completions\n", path, asset, publicURL)
	printf(out, "   llm4agents chat --key-file %s --asset %s --url %s\n", path, asset, publicURL)
	printf(out, "   dashboard: %s/dashboard (sign in as the demo buyer or operator, no browser wallet needed, to see the calls, keys and receipts)\n", publicURL)
	select {
	case <-ctx.Done():
		return false, nil
	case <-srvDone:
		return true, nil
	}
}

// loopbackAddr accepts host:port where host is a loopback address or
// "localhost": the demo's chain, keys and payments are for this machine only.
func loopbackAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", shorten(addr, 64))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not 1-65535", shorten(port, 16))
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("host %q is not a loopback address (127.0.0.1, ::1 or localhost): the demo serves this machine only", shorten(host, 64))
	}
	return nil
}

func post(ctx context.Context, c *http.Client, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.Do(req)
}

func mustAmount(s string) *big.Int {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return new(big.Int)
	}
	return n
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// usdc formats atomic units of a 6-decimal token.
func usdc(n *big.Int) string {
	q, r := new(big.Int).QuoRem(n, big.NewInt(1_000_000), new(big.Int))
	return fmt.Sprintf("%s.%06s", q, r.String())
}
