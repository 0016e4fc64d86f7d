package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

const (
	// maxPayBody bounds a request body read from a file or stdin.
	maxPayBody = 16 << 20
	// maxJSONBody bounds a response body that --json must hold in memory.
	maxJSONBody = 16 << 20
	// maxRepeat bounds --repeat.
	maxRepeat = 10_000
	// maxRedirects is http.Client's own limit.
	maxRedirects = 10
)

// headerFlag collects repeated -H values as they are; a header value may hold
// commas.
type headerFlag []string

func (h *headerFlag) String() string     { return fmt.Sprintf("%d headers", len(*h)) }
func (h *headerFlag) Set(s string) error { *h = append(*h, s); return nil }

// payFlags is `llm4agents pay` checked and parsed.
type payFlags struct {
	buyer   buyerFlags
	method  string
	data    string
	headers headerFlag
	dryRun  bool
	json    bool
	repeat  int
	timeout time.Duration
	verbose bool
	rpc     string // --dry-run reads the Permit2 allowance and the balances there

	target *url.URL
	header http.Header
	body   []byte // nil: no body
	spend  *spending
}

// parsePayFlags checks every flag and the URL before anything is sent. Flags
// may come before or after the URL. -d @file and -d @- are read here.
func parsePayFlags(args []string, e env, stdin io.Reader) (*payFlags, error) {
	fs := flag.NewFlagSet("pay", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "usage: llm4agents pay [flags] URL\n\nSends one HTTP request and pays its 402 (x402 v2, exact or upto on EVM) within the spending flags.\nThe body goes to stdout, a summary of the payment to stderr. An upto offer (pay what the call\ncost, up to its maximum) is preferred and needs the wallet's one-time Permit2 approval of the\ntoken ('llm4agents wallet approve-permit2'; --dry-run --rpc URL says whether it is there).\n\nflags:\n")
		fs.PrintDefaults()
	}
	var f payFlags
	f.buyer.register(fs)
	fs.StringVar(&f.method, "X", "", "HTTP method (default GET, or POST with -d)")
	fs.StringVar(&f.data, "d", "", "request body: the text itself, @FILE, or @- for stdin (a JSON body is sent as application/json unless -H names a Content-Type)")
	fs.Var(&f.headers, "H", "request header 'Name: value' (repeatable)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "fetch the 402 and print its payment options and what would be paid; sign and pay nothing")
	fs.BoolVar(&f.json, "json", false, "print a JSON result on stdout (one line per request) instead of the body")
	fs.IntVar(&f.repeat, "repeat", 1, "send the request this many times, paying each within one budget, with progress on stderr")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "limit on each request, its payment and its body")
	fs.BoolVar(&f.verbose, "v", false, "log what the payment client does (never a key or a payment header)")
	fs.StringVar(&f.rpc, "rpc", "", "JSON-RPC URL of a chain the 402 may offer: the wallet's balance of each offered token there is read before signing, and an offer it cannot cover is passed over for the next one (refused: balance), as is an upto offer the wallet's Permit2 approval does not cover (refused: permit2_allowance); with --dry-run it also reads whether the wallet has approved Permit2 for an upto option (reads only; signs nothing)")
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(positional) == 0:
		return nil, errors.New("pay: a URL is required")
	case len(positional) > 1:
		return nil, fmt.Errorf("pay: %d URLs given (values are not echoed); give one", len(positional))
	case f.repeat < 1 || f.repeat > maxRepeat:
		return nil, fmt.Errorf("pay: --repeat %d is outside [1, %d]", f.repeat, maxRepeat)
	case f.timeout <= 0:
		return nil, errors.New("pay: --timeout must be positive")
	case f.dryRun && f.repeat > 1:
		return nil, errors.New("pay: --dry-run sends one request; drop --repeat")
	}
	var err error
	if f.target, err = parseTarget(positional[0]); err != nil {
		return nil, fmt.Errorf("pay: %w", err)
	}
	if f.header, err = parseHeaders(f.headers); err != nil {
		return nil, fmt.Errorf("pay: %w", err)
	}
	if f.body, err = readData(f.data, stdin); err != nil {
		return nil, fmt.Errorf("pay: -d: %w", err)
	}
	if f.method == "" {
		f.method = http.MethodGet
		if f.body != nil {
			f.method = http.MethodPost
		}
	}
	if !isToken(f.method) {
		return nil, errors.New("pay: -X is not an HTTP method name")
	}
	if f.body != nil && f.header.Get("Content-Type") == "" && json.Valid(f.body) {
		f.header.Set("Content-Type", "application/json")
	}
	if f.spend, err = f.buyer.parse(); err != nil {
		return nil, fmt.Errorf("pay: %w", err)
	}
	return &f, nil
}

// parseTarget accepts an absolute http or https URL. Its errors do not repeat
// the URL, which may carry a credential.
func parseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("the URL is not an absolute http:// or https:// URL (not echoed)")
	}
	return u, nil
}

// parseHeaders reads -H 'Name: value' values. Errors name the header by its
// position, never its value, which may be a credential.
func parseHeaders(raw []string) (http.Header, error) {
	h := http.Header{}
	for i, v := range raw {
		name, value, ok := strings.Cut(v, ":")
		name = strings.TrimSpace(name)
		switch {
		case !ok || !isToken(name):
			return nil, fmt.Errorf("-H #%d: want 'Name: value' with a valid header name (value not echoed)", i+1)
		case strings.ContainsAny(value, "\r\n\x00"):
			return nil, fmt.Errorf("-H #%d (%s): the value holds a line break or NUL", i+1, name)
		}
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			return nil, fmt.Errorf("-H #%d: %s is set by the HTTP client, not by -H", i+1, http.CanonicalHeaderKey(name))
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), as header
// names and methods must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// readData reads -d: "" is no body, @- is stdin, @FILE a file, anything else
// the text itself.
func readData(d string, stdin io.Reader) ([]byte, error) {
	switch {
	case d == "":
		return nil, nil
	case d == "@-":
		if stdin == nil {
			return nil, errors.New("no stdin to read")
		}
		return readBounded(stdin, maxPayBody)
	case strings.HasPrefix(d, "@"):
		fh, err := os.Open(d[1:]) // #nosec G304 -- the user names the file to send
		if err != nil {
			return nil, err
		}
		defer func() { _ = fh.Close() }() // read-only
		return readBounded(fh, maxPayBody)
	default:
		return []byte(d), nil
	}
}

func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// newRequest builds one request of the run; each has a fresh, replayable body.
func (f *payFlags) newRequest(ctx context.Context) (*http.Request, error) {
	var body io.Reader
	if f.body != nil {
		body = bytes.NewReader(f.body)
	}
	req, err := http.NewRequestWithContext(ctx, f.method, f.target.String(), body) // #nosec G704 -- the user names the URL to pay
	if err != nil {
		return nil, errors.New("cannot build the request (URL not echoed)")
	}
	req.Header = f.header.Clone()
	return req, nil
}

// requestLine names the request for a person: the method and the URL without
// its query or user info.
func requestLine(method string, u *url.URL) string { return method + " " + displayURL(u) }

func displayURL(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// runPay sends one request (or --repeat of them) and pays its 402 within the
// spending flags: `llm4agents pay [flags] URL`.
func runPay(ctx context.Context, args []string, e env, stdin io.Reader) error {
	f, err := parsePayFlags(args, e, stdin)
	if err != nil {
		return err
	}
	in := &inspector{next: http.DefaultTransport}
	hc := &http.Client{Transport: in, CheckRedirect: sameOriginRedirects}
	if f.dryRun {
		return dryRun(ctx, hc, f, e)
	}
	key, err := loadWallet(f.buyer.keyFile, e.getenv, e.stderr)
	if err != nil {
		return fmt.Errorf("pay: %w", err)
	}
	journal, err := f.buyer.openJournal()
	if err != nil {
		return fmt.Errorf("pay: %w", err)
	}
	logOut := io.Discard
	if f.verbose {
		logOut = e.stderr
	}
	tr := &client.Transport{
		Base:    in,
		Signer:  exact.NewKeySigner(key),
		Policy:  f.spend.policy,
		Journal: journal,
		Log:     slog.New(slog.NewTextHandler(logOut, nil)),
	}
	if f.rpc != "" {
		bal, closeNode, err := dialBalances(ctx, f.rpc)
		if err != nil {
			return fmt.Errorf("pay: --rpc: %w", err)
		}
		defer closeNode()
		tr.Policy.Balances = bal
	}
	hc.Transport = tr
	b := &buyer{in: in, tr: tr, spend: f.spend, receipts: newReceiptVerifier(f.timeout)}
	tr.OnCharge = b.noteCharge
	for i := 1; i <= f.repeat; i++ {
		if err := payOnce(ctx, hc, b, f, e, i); err != nil {
			return err
		}
	}
	return nil
}

// buyer is the paying side of one pay or chat run: the client.Transport, the
// inspector under it and the spending flags.
type buyer struct {
	in    *inspector
	tr    *client.Transport
	spend *spending
	// receipts verifies the gateway's signed receipts (D18); nil
	// leaves them unchecked.
	receipts *client.ReceiptVerifier

	mu sync.Mutex
	// charge is what the Transport concluded of the last payment it sent
	// (client.Transport.OnCharge), taken by outcome.
	charge *client.Charge
}

// noteCharge is the Transport's OnCharge.
func (b *buyer) noteCharge(_ context.Context, c client.Charge) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.charge = &c
}

// takeCharge returns the charge noted since the last call, or nil.
func (b *buyer) takeCharge() *client.Charge {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.charge
	b.charge = nil
	return c
}

// newReceiptVerifier checks receipts against the well-known document of the
// origin that sent them, fetched unpaid, never following a redirect
// elsewhere.
func newReceiptVerifier(timeout time.Duration) *client.ReceiptVerifier {
	return &client.ReceiptVerifier{Client: &http.Client{Timeout: timeout, CheckRedirect: sameOriginRedirects}}
}

// receiptCheck is what a response's X-Llm4agents-Receipt came to.
type receiptCheck struct {
	Receipt   *receipt.Receipt `json:"receipt,omitempty"`
	Signature string           `json:"signature,omitempty"`
	Verified  bool             `json:"verified"`
	Signer    string           `json:"signer,omitempty"`
	Error     string           `json:"error,omitempty"`
}

// checkReceipt verifies the receipt header of resp, if any, against the
// signer its origin publishes. It returns nil when there is no receipt.
func (b *buyer) checkReceipt(ctx context.Context, resp *http.Response) *receiptCheck {
	v := resp.Header.Get(receipt.Header)
	if v == "" || b.receipts == nil {
		return nil
	}
	rc := &receiptCheck{}
	r, sig, err := receipt.DecodeHeader(v)
	if err != nil {
		rc.Error = err.Error()
		return rc
	}
	rc.Receipt, rc.Signature = r, "0x"+hex.EncodeToString(sig)
	signer, err := b.receipts.VerifySigner(ctx, client.OriginOf(resp.Request.URL), r, sig)
	if err != nil {
		rc.Error = err.Error()
		return rc
	}
	rc.Verified, rc.Signer = true, signer.Hex()
	return rc
}

// line says for a person what the receipt check found.
func (rc *receiptCheck) line() string {
	if rc.Verified {
		return fmt.Sprintf("receipt verified (signer %s)", rc.Signer)
	}
	return "receipt NOT verified: " + rc.Error
}

// payOnce sends the request once and reports the outcome.
func payOnce(ctx context.Context, hc *http.Client, b *buyer, f *payFlags, e env, i int) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := f.newRequest(ctx)
	if err != nil {
		return fmt.Errorf("pay: %w", err)
	}
	line := requestLine(f.method, f.target)
	mark := b.in.mark()
	b.takeCharge()
	resp, err := hc.Do(req) // #nosec G704 -- the user names the URL to pay
	if err != nil {
		res := &payJSON{Request: line}
		err = b.failure(line, err, e.stderr, res)
		if f.json {
			res.fill(b)
			res.Error = err.Error()
			writeJSON(e.stdout, res)
		}
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned on error
	p := b.outcome(resp, mark)
	res := &payJSON{Request: line, Status: resp.StatusCode}
	var readErr error
	if f.json {
		var body []byte
		body, readErr = readBounded(resp.Body, maxJSONBody)
		res.setBody(body)
		res.Headers = headersOfInterest(resp.Header)
		p.fillJSON(res, b.spend)
	} else {
		_, readErr = io.Copy(e.stdout, resp.Body)
	}
	prefix := ""
	if f.repeat > 1 {
		prefix = fmt.Sprintf("[%d/%d] ", i, f.repeat)
	}
	// The payment is reported even when the body was cut short.
	printf(e.stderr, "%s%s\n", prefix, p.summary(b))
	err = p.err(resp)
	if rc := b.checkReceipt(ctx, resp); rc != nil {
		printf(e.stderr, "%s%s\n", prefix, rc.line())
		res.Receipt = rc
		if !rc.Verified && err == nil {
			err = fmt.Errorf("pay: %s: the response's receipt does not verify against %s%s", line, client.OriginOf(resp.Request.URL), receipt.WellKnownPath)
		}
	}
	if readErr != nil {
		err = fmt.Errorf("pay: read the response body: %w", readErr)
	}
	if f.json {
		res.fill(b)
		if err != nil {
			res.Error = err.Error()
		}
		writeJSON(e.stdout, res)
	}
	return err
}

// payment is what one paid (or unpaid) exchange came to.
type payment struct {
	status   int
	location string
	// paid is the requirement of the payment sent, nil when none was, and
	// paidIndex its position in the 402's accepts (-1: not known).
	paid      *x402.PaymentRequirements
	paidIndex int
	sr        *x402.SettleResponse
	srErr     error // nil, or why PAYMENT-RESPONSE did not decode
	// charge is what the Transport counted of the payment; nil when it
	// sent none.
	charge *client.Charge
	// refused is the error of a PAYMENT-REQUIRED answering the payment, ""
	// when there is none.
	refused string
}

// needsApproval reports whether the server refused an upto payment because
// the wallet's Permit2 allowance does not cover it (the official server
// answers 412 Precondition Failed).
func (p *payment) needsApproval() bool {
	return p.upto() && p.refused == string(x402.ReasonPermit2AllowanceRequired)
}

// approvalHint says how to fix a missing Permit2 approval.
func (p *payment) approvalHint() string {
	return "the wallet has not approved Permit2 to move this token (permit2_allowance_required); nothing was charged; run llm4agents wallet approve-permit2 --rpc URL --asset " + p.paid.Asset
}

// outcome reads what the answer to a request says about its payment.
func (b *buyer) outcome(resp *http.Response, mark int) *payment {
	p := &payment{status: resp.StatusCode, location: resp.Header.Get("Location"), charge: b.takeCharge()}
	if sent := b.in.paidSince(mark); len(sent) > 0 {
		p.paid, p.paidIndex = &sent[0].Req, sent[0].Index
	}
	sr, err := client.SettleResponse(resp)
	switch {
	case err == nil:
		p.sr = sr
	case !errors.Is(err, client.ErrNoSettleResponse):
		p.srErr = err
	}
	if pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired)); err == nil && p.paid != nil {
		p.refused = pr.Error
	}
	return p
}

// summary is one line for stderr about the exchange and its payment.
func (p *payment) summary(b *buyer) string {
	var s strings.Builder
	status := fmt.Sprintf("%d %s", p.status, http.StatusText(p.status))
	if p.paid == nil {
		fmt.Fprintf(&s, "%s; no payment was asked for or sent", status)
	} else {
		amount := formatRequirementAmount(p.paid, b.spend.decimals)
		kind := "payment of"
		if p.upto() {
			kind = "upto payment of at most"
		}
		fmt.Fprintf(&s, "%s; %s %s to %s on %s", status, kind, amount, p.paid.PayTo, p.paid.Network)
		switch {
		case p.srErr != nil:
			fmt.Fprintf(&s, ": the PAYMENT-RESPONSE header does not decode (%v)", p.srErr)
		case p.sr == nil && p.status/100 == 2:
			s.WriteString(": served, with no PAYMENT-RESPONSE to name the transaction")
		case p.sr == nil:
			s.WriteString(": not settled (no PAYMENT-RESPONSE)")
		case p.sr.Success && p.upto() && p.sr.Amount == "":
			fmt.Fprintf(&s, ": settled in transaction %s without saying how much; counted as the maximum", p.sr.Transaction)
		case p.sr.Success && p.upto() && p.charged() != nil:
			fmt.Fprintf(&s, ": charged %s, settled in transaction %s", formatAtomic(p.charged(), b.spend.decimals), p.sr.Transaction)
		case p.sr.Success:
			fmt.Fprintf(&s, ": settled in transaction %s", p.sr.Transaction)
		case p.sr.ErrorReason == x402.ReasonSettlementPending:
			fmt.Fprintf(&s, ": settlement pending in transaction %s; it may still go through before the authorization expires", p.sr.Transaction)
		default:
			fmt.Fprintf(&s, ": refused (%s)", p.sr.ErrorReason)
		}
		if p.needsApproval() {
			s.WriteString("; " + p.approvalHint())
		} else if p.status == http.StatusPaymentRequired {
			s.WriteString("; the server asked again after the payment, and it was not paid twice")
		}
		if err := p.chargeErr(); err != nil {
			fmt.Fprintf(&s, "; WARNING: %v", err)
		}
	}
	if p.status/100 == 3 && p.location != "" {
		if u, err := url.Parse(p.location); err == nil && u.IsAbs() {
			fmt.Fprintf(&s, "; not following the redirect to %s (another origin: payment headers are never sent there)", displayURL(u))
		}
	}
	fmt.Fprintf(&s, "; spent %s of %s", b.spend.human(b.tr.Spent()), b.spend.human(b.spend.policy.Budget))
	return s.String()
}

// upto reports whether the payment sent was an upto one.
func (p *payment) upto() bool { return p.paid != nil && p.paid.Scheme == upto.Scheme }

// charged is what the Transport counted as spent for the payment, nil when it
// counted nothing (not paid, or the outcome is unknown).
func (p *payment) charged() *big.Int {
	if p.charge == nil {
		return nil
	}
	return p.charge.Amount
}

// chargeErr is an upto settlement amount the Transport could not take at its
// word (client.ErrSettledAmount), nil otherwise.
func (p *payment) chargeErr() error {
	if p.charge == nil || !errors.Is(p.charge.Err, client.ErrSettledAmount) {
		return nil
	}
	return p.charge.Err
}

// err is the run's verdict on a response: nil for a 2xx whose settlement
// says nothing impossible.
func (p *payment) err(resp *http.Response) error {
	switch {
	case p.status/100 == 2 && p.chargeErr() != nil:
		return fmt.Errorf("pay: the seller's settlement cannot be right: %w", p.chargeErr())
	case p.status/100 == 2:
		return nil
	case p.needsApproval():
		return fmt.Errorf("pay: the server answered %s: %s", resp.Status, p.approvalHint())
	case p.status == http.StatusPaymentRequired && p.paid != nil:
		return errors.New("pay: the server answered 402 again after the payment; not paying a second time")
	default:
		return fmt.Errorf("pay: the server answered %s", resp.Status)
	}
}

// failure turns an error of http.Client.Do into the run's error, and prints the
// 402's options with why each was refused when nothing could be paid.
func (b *buyer) failure(line string, err error, w io.Writer, res *payJSON) error {
	err = withoutURL(err)
	var np *client.NoPayableOptionError
	switch {
	case errors.As(err, &np):
		pr, vs := b.in.explain(np)
		if pr != nil {
			printOptions(w, line, pr, vs, b.spend)
			res.Options = optionsJSON(vs, b.spend.decimals)
		}
		return fmt.Errorf("pay: %s: no payment option is allowed by the spending flags; nothing was signed or paid", line)
	case errors.Is(err, client.ErrNoPaymentRequired), errors.Is(err, client.ErrBadPaymentRequired):
		return fmt.Errorf("pay: %s: %w; nothing was signed or paid", line, err)
	default:
		return fmt.Errorf("pay: %s: %w", line, err)
	}
}

// withoutURL unwraps the *url.Error of http.Client.Do, whose message repeats
// the whole URL, query and user info included.
func withoutURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// sameOriginRedirects follows redirects within the first request's origin
// only. A redirect elsewhere is answered as it is: neither the request nor its
// payment goes to an origin the user did not name.
func sameOriginRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if !sameOrigin(via[0].URL, req.URL) {
		return http.ErrUseLastResponse
	}
	return nil
}

// sameOrigin compares scheme, host and port, with default ports made explicit.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(originHostPort(a), originHostPort(b))
}

func originHostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return u.Hostname() + ":443"
	default:
		return u.Hostname() + ":80"
	}
}

// dryRun sends the request unpaid and prints the 402's options and what the
// spending flags would do with each. Nothing is signed: no key is read.
func dryRun(ctx context.Context, hc *http.Client, f *payFlags, e env) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := f.newRequest(ctx)
	if err != nil {
		return fmt.Errorf("pay: %w", err)
	}
	line := requestLine(f.method, f.target)
	resp, err := hc.Do(req) // #nosec G704 -- the user names the URL to pay
	if err != nil {
		return fmt.Errorf("pay: %s: %w", line, withoutURL(err))
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10) // a dry run shows no body
	_ = resp.Body.Close()
	res := &payJSON{Request: line, DryRun: true, Status: resp.StatusCode}
	if resp.StatusCode != http.StatusPaymentRequired {
		if f.json {
			res.Headers = headersOfInterest(resp.Header)
			writeJSON(e.stdout, res)
		} else {
			printf(e.stdout, "%s\n%s: the server asked for no payment; nothing to pay.\n", line, resp.Status)
		}
		return nil
	}
	header := resp.Header.Get(x402.HeaderPaymentRequired)
	if header == "" {
		return fmt.Errorf("pay: %s: %w", line, client.ErrNoPaymentRequired)
	}
	pr, err := x402.DecodePaymentRequired(header)
	if err != nil {
		return fmt.Errorf("pay: %s: %w: %w", line, client.ErrBadPaymentRequired, err)
	}
	spend := f.spend
	if f.rpc != "" {
		bal, check, closeNode := dryRunBalances(ctx, f, e)
		defer closeNode()
		res.Balances = check
		if bal != nil {
			withBalances := *f.spend
			withBalances.policy.Balances = bal
			spend = &withBalances
		}
	}
	vs, err := judge(ctx, spend, header, pr)
	if err != nil {
		return fmt.Errorf("pay: %s: %w", line, err)
	}
	for _, v := range vs {
		if v.Pay && v.Req.Scheme == upto.Scheme {
			res.Permit2 = checkApproval(ctx, f, e, v.Req)
		}
	}
	if f.json {
		res.Headers = headersOfInterest(resp.Header)
		res.Options = optionsJSON(vs, f.spend.decimals)
		res.Budget = f.spend.policy.Budget.String()
		writeJSON(e.stdout, res)
		return nil
	}
	printOptions(e.stdout, line, pr, vs, f.spend)
	if res.Permit2 != nil {
		printf(e.stdout, "permit2: %s\n", res.Permit2.Note)
	}
	if res.Balances != nil {
		printf(e.stdout, "balances: %s\n", res.Balances.Note)
	}
	printf(e.stdout, "dry run: nothing was signed or paid.\n")
	return nil
}

// printOptions writes a 402's options, one block each, with what is or would
// be done with each, for a person.
func printOptions(w io.Writer, line string, pr *x402.PaymentRequired, vs []verdict, s *spending) {
	printf(w, "%s\n402 Payment Required", line)
	if pr.Error != "" {
		printf(w, " (%q)", pr.Error)
	}
	printf(w, ": %d payment option(s); amounts in whole tokens read at %d decimals (--decimals)\n", len(pr.Accepts), s.decimals)
	if pr.Resource != nil && (pr.Resource.Description != "" || pr.Resource.URL != "") {
		printf(w, "resource %s %s\n", pr.Resource.URL, quoteIfAny(pr.Resource.Description))
	}
	for _, v := range vs {
		r := v.Req
		printf(w, "[%d] %s on %s\n", v.Index, r.Scheme, r.Network)
		if r.Scheme == upto.Scheme {
			printf(w, "    maximum  %s (upto: the server charges what the call costs, at most this)\n", formatRequirementAmount(&r, s.decimals))
		} else {
			printf(w, "    amount   %s\n", formatRequirementAmount(&r, s.decimals))
		}
		printf(w, "    asset    %s%s\n", r.Asset, tokenDomain(r.Extra))
		if r.Scheme == upto.Scheme {
			if x, err := upto.ParseExtra(r.Extra); err == nil {
				printf(w, "    settles  through Permit2, by facilitator %s only\n", x.FacilitatorAddress.Hex())
			}
		}
		printf(w, "    pay to   %s\n", r.PayTo)
		printf(w, "    valid    %ds\n", r.MaxTimeoutSeconds)
		if v.Pay {
			printf(w, "    verdict  PAY: %s\n", v.Label)
		} else {
			printf(w, "    verdict  refused (%s): %s\n", v.RefusalError, v.Label)
		}
	}
	printf(w, "policy: %s\n", s.describe())
}

func quoteIfAny(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("(%q)", s)
}

// tokenDomain shows the EIP-712 name and version an exact option carries; they
// are the server's claim, not a proof of what the token is.
func tokenDomain(extra json.RawMessage) string {
	var d struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if json.Unmarshal(extra, &d) != nil || d.Name == "" {
		return ""
	}
	return fmt.Sprintf(" (%q version %q, as the server names it)", d.Name, d.Version)
}

// formatRequirementAmount shows an option's amount in atomic units and in
// whole tokens.
func formatRequirementAmount(r *x402.PaymentRequirements, decimals int) string {
	n, err := exact.ParseUint256(r.Amount)
	if err != nil {
		return fmt.Sprintf("%q (not an amount)", r.Amount)
	}
	return fmt.Sprintf("%s atomic units = %s", n, formatAmount(n, decimals))
}

// headersOfInterest are the response headers --json reports.
func headersOfInterest(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"Content-Type", x402.HeaderPaymentResponse, x402.HeaderPaymentRequired, receipt.Header, "X-Llm4agents-Replay", "Retry-After", "Location"} {
		if v := h.Get(k); v != "" {
			out[strings.ToLower(k)] = v
		}
	}
	return out
}

// payJSON is the --json result of one request.
type payJSON struct {
	Request              string               `json:"request"`
	DryRun               bool                 `json:"dryRun,omitempty"`
	Status               int                  `json:"status,omitempty"`
	Paid                 *optionJSON          `json:"paid,omitempty"`
	PaymentResponse      *x402.SettleResponse `json:"paymentResponse,omitempty"`
	PaymentResponseError string               `json:"paymentResponseError,omitempty"`
	// Charged is what the payment was counted at, in atomic units: an upto
	// payment's settled amount, an exact one's amount.
	Charged string `json:"charged,omitempty"`
	// ChargeError says why an upto settlement's amount was not taken.
	ChargeError string `json:"chargeError,omitempty"`
	// Permit2 is what --dry-run found of the Permit2 approval an upto
	// option needs.
	Permit2    *approvalCheck    `json:"permit2,omitempty"`
	Balances   *balanceCheck     `json:"balances,omitempty"` // what --dry-run --rpc read of the wallet's balances
	Receipt    *receiptCheck     `json:"receipt,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       json.RawMessage   `json:"body,omitempty"`
	BodyText   *string           `json:"bodyText,omitempty"`
	BodyBase64 string            `json:"bodyBase64,omitempty"`
	Options    []optionJSON      `json:"options,omitempty"`
	Spent      string            `json:"spent,omitempty"`
	Budget     string            `json:"budget,omitempty"`
	Error      string            `json:"error,omitempty"`
}

// optionJSON is one option of a 402 in --json output. Index is its position
// in the 402's accepts; it is absent only for a payment no 402 offered (one
// sent with -H).
type optionJSON struct {
	Index             *int            `json:"index,omitempty"`
	Scheme            string          `json:"scheme"`
	Network           string          `json:"network"`
	Asset             string          `json:"asset"`
	Amount            string          `json:"amount"`
	AmountTokens      string          `json:"amountTokens,omitempty"`
	PayTo             string          `json:"payTo"`
	MaxTimeoutSeconds int64           `json:"maxTimeoutSeconds"`
	Extra             json.RawMessage `json:"extra,omitempty"`
	Pay               bool            `json:"pay"`
	RefusalError      string          `json:"refusal,omitempty"`
	Label             string          `json:"label,omitempty"`
}

// newOptionJSON shows r, the option at index i of its 402 (-1: not known).
func newOptionJSON(i int, r x402.PaymentRequirements, decimals int) optionJSON {
	o := optionJSON{Scheme: r.Scheme, Network: r.Network, Asset: r.Asset, Amount: r.Amount,
		PayTo: r.PayTo, MaxTimeoutSeconds: r.MaxTimeoutSeconds, Extra: r.Extra}
	if i >= 0 {
		o.Index = &i
	}
	if n, err := exact.ParseUint256(r.Amount); err == nil {
		o.AmountTokens = formatAmount(n, decimals)
	}
	return o
}

func optionsJSON(vs []verdict, decimals int) []optionJSON {
	out := make([]optionJSON, len(vs))
	for i, v := range vs {
		out[i] = newOptionJSON(v.Index, v.Req, decimals)
		out[i].Pay, out[i].RefusalError, out[i].Label = v.Pay, v.RefusalError, v.Label
	}
	return out
}

func (r *payJSON) setBody(b []byte) {
	switch {
	case len(b) == 0:
	case json.Valid(b):
		r.Body = b
	case utf8.Valid(b):
		s := string(b)
		r.BodyText = &s
	default:
		r.BodyBase64 = base64.StdEncoding.EncodeToString(b)
	}
}

func (p *payment) fillJSON(r *payJSON, s *spending) {
	if p.paid != nil {
		o := newOptionJSON(p.paidIndex, *p.paid, s.decimals)
		o.Pay = true
		r.Paid = &o
	}
	r.PaymentResponse = p.sr
	if p.srErr != nil {
		r.PaymentResponseError = p.srErr.Error()
	}
	if c := p.charged(); c != nil {
		r.Charged = c.String()
	}
	if err := p.chargeErr(); err != nil {
		r.ChargeError = err.Error()
	}
}

func (r *payJSON) fill(b *buyer) {
	r.Spent = b.tr.Spent().String()
	r.Budget = b.spend.policy.Budget.String()
}

// writeJSON writes v as one line of JSON. Like printf, a failed write to the
// output has nowhere to be reported.
func writeJSON(w io.Writer, v any) {
	b, err := x402.Marshal(v)
	if err != nil {
		printf(w, "{\"error\":%q}\n", err.Error())
		return
	}
	printf(w, "%s\n", b)
}

// approvalCheck is what a dry run found of the Permit2 approval an upto
// option needs: the wallet's allowance to Permit2 on the asset must cover the
// maximum, or the server refuses the payment.
type approvalCheck struct {
	// Needed is whether `llm4agents wallet approve-permit2` must run first;
	// absent when it cannot tell.
	Needed    *bool  `json:"needed,omitempty"`
	Owner     string `json:"owner,omitempty"`
	Allowance string `json:"allowance,omitempty"`
	Maximum   string `json:"maximum"`
	// Note says it for a person.
	Note string `json:"note"`
}

// checkApproval reads, with --rpc, whether the wallet's Permit2 allowance on
// req's asset covers req's maximum. It needs the wallet's address, so it
// reads the key (--key-file or the environment) but signs nothing. What it
// cannot read it says it cannot tell.
func checkApproval(ctx context.Context, f *payFlags, e env, req x402.PaymentRequirements) *approvalCheck {
	c := &approvalCheck{Maximum: req.Amount}
	hint := "llm4agents wallet approve-permit2 --rpc URL --asset " + req.Asset
	cannot := func(why string) *approvalCheck {
		c.Note = "upto pays through Permit2, which needs the wallet's one-time approval of the token; cannot tell whether it is there: " + why + "; if it is not, run " + hint
		return c
	}
	if f.rpc == "" {
		return cannot("give --rpc to read the allowance")
	}
	maximum, err := exact.ParseUint256(req.Amount)
	if err != nil {
		return cannot("the offer's amount is not one")
	}
	want, err := exact.ChainID(req.Network)
	if err != nil {
		return cannot("the offer's network is not an eip155 chain")
	}
	key, err := loadWallet(f.buyer.keyFile, e.getenv, io.Discard)
	if err != nil {
		return cannot("no wallet key to name the owner (--key-file or " + walletKeyEnv + ")")
	}
	owner := crypto.PubkeyToAddress(key.PublicKey)
	c.Owner = owner.Hex()
	ec, err := ethclient.DialContext(ctx, f.rpc)
	if err != nil {
		return cannot(fmt.Sprintf("--rpc: %v", redactURL(err, f.rpc)))
	}
	defer ec.Close()
	got, err := ec.ChainID(ctx)
	switch {
	case err != nil:
		return cannot(fmt.Sprintf("--rpc: %v", redactURL(err, f.rpc)))
	case got.Cmp(want) != 0:
		return cannot(fmt.Sprintf("the --rpc node is chain %s, the offer is on %s", got, req.Network))
	}
	allowance, err := upto.Permit2Allowance(ctx, ec, common.HexToAddress(req.Asset), owner)
	if err != nil {
		return cannot(fmt.Sprintf("allowance: %v", redactURL(err, f.rpc)))
	}
	c.Allowance = allowance.String()
	needed := allowance.Cmp(maximum) < 0
	c.Needed = &needed
	if needed {
		c.Note = fmt.Sprintf("the upto option needs a Permit2 approval first: %s may move %s of %s, less than the maximum %s; run %s",
			owner.Hex(), formatAtomic(allowance, f.spend.decimals), req.Asset, formatAtomic(maximum, f.spend.decimals), hint)
	} else {
		c.Note = fmt.Sprintf("Permit2 may move %s of %s from %s, which covers the maximum %s",
			formatAtomic(allowance, f.spend.decimals), req.Asset, owner.Hex(), formatAtomic(maximum, f.spend.decimals))
	}
	return c
}
