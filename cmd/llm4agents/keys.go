package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Account routes of the gateway (internal/credits and internal/gateway).
const (
	pathNonce    = "/v1/auth/nonce"
	pathVerify   = "/v1/auth/verify"
	pathKeys     = "/v1/keys"
	pathTopUp    = "/v1/credits/topup"
	pathBalance  = "/v1/credits/balance"
	pathReceipts = "/v1/receipts"
)

const (
	// gatewayEnv may name the gateway instead of --gateway.
	gatewayEnv = "LLM4AGENTS_GATEWAY"
	// apiKeyEnv may hold an sk-l4a- key for the commands that accept one.
	apiKeyEnv = "LLM4AGENTS_API_KEY" // #nosec G101 -- the name of the variable, not a key
	// maxAccountBody bounds an answer of the account routes.
	maxAccountBody = 1 << 20
	// signInStatement is the statement of the EIP-4361 message the CLI signs.
	signInStatement = "Sign in to llm4agents to manage API keys and credits."
)

// accountFlags are the flags every keys and credits subcommand shares.
type accountFlags struct {
	gateway  string
	keyFile  string
	json     bool
	timeout  time.Duration
	decimals int

	base *url.URL
}

// register adds the flags; --key-file and --decimals only when asked, as
// topup takes them from the buyer flags.
func (a *accountFlags) register(fs *flag.FlagSet, withKeyFile, withDecimals bool) {
	fs.StringVar(&a.gateway, "gateway", "", "the gateway's URL, such as https://gw.example.com (default $"+gatewayEnv+")")
	if withKeyFile {
		fs.StringVar(&a.keyFile, "key-file", "", "file holding the wallet's hex private key, to sign in with (or set "+walletKeyEnv+"; never a flag value)")
	}
	fs.BoolVar(&a.json, "json", false, "print JSON on stdout instead of text")
	fs.DurationVar(&a.timeout, "timeout", time.Minute, "limit on the whole command")
	a.decimals = defaultDecimals
	if withDecimals {
		fs.IntVar(&a.decimals, "decimals", defaultDecimals, "decimals of the credit asset, to read and print amounts in whole tokens")
	}
}

// check validates the shared flags after parsing.
func (a *accountFlags) check(getenv func(string) string) error {
	if a.gateway == "" {
		a.gateway = getenv(gatewayEnv)
	}
	if a.gateway == "" {
		return fmt.Errorf("--gateway URL is required (or set %s)", gatewayEnv)
	}
	u, err := parseTarget(a.gateway)
	if err != nil {
		return fmt.Errorf("--gateway: %w", err)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return errors.New("--gateway: give the origin only, such as https://gw.example.com (value not echoed)")
	}
	a.base = &url.URL{Scheme: u.Scheme, Host: u.Host}
	switch {
	case a.timeout <= 0:
		return errors.New("--timeout must be positive")
	case a.decimals < 0 || a.decimals > maxDecimals:
		return fmt.Errorf("--decimals %d is outside [0, %d]", a.decimals, maxDecimals)
	}
	return nil
}

// parseSub parses a subcommand's flags, which may come before or after its
// positional arguments, and returns those.
func parseSub(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// account talks to the gateway's account routes as one wallet or key.
type account struct {
	hc   *http.Client
	base *url.URL
	// bearer is the session token or API key sent with Authorization.
	bearer client.Secret
}

func newAccount(f *accountFlags) *account {
	return &account{hc: &http.Client{Timeout: f.timeout, CheckRedirect: sameOriginRedirects}, base: f.base}
}

// apiError is an answer of the gateway other than the one asked for; its
// text is the gateway's OpenAI-style message, never a secret of ours.
type apiError struct {
	Route   string
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("%s: the gateway answered %d %s", e.Route, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// do sends method path with body as JSON (nil: none) and, when the answer
// has status want, decodes it into out. It returns the raw answer.
func (a *account) do(ctx context.Context, method, path string, body any, want int, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := x402.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base.String()+path, rd) // #nosec G704 -- the user names the gateway
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+a.bearer.Reveal())
	}
	resp, err := a.hc.Do(req) // #nosec G704 -- the user names the gateway
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, withoutURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := readBounded(resp.Body, maxAccountBody)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return nil, gatewayError(method+" "+path, resp.StatusCode, b)
	}
	if out != nil {
		if err := x402.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: the answer is not the expected JSON: %w", method, path, err)
		}
	}
	return b, nil
}

// gatewayError reads an OpenAI-style error body, if there is one.
func gatewayError(route string, status int, body []byte) error {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	ae := &apiError{Route: route, Status: status}
	if json.Unmarshal(body, &e) == nil {
		ae.Code, ae.Message = oneLine(e.Error.Code, 64), oneLine(e.Error.Message, 300)
	}
	return ae
}

// oneLine keeps at most n bytes of s on one line of printable characters,
// so a hostile gateway cannot draw on the terminal.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// nonceAnswer is the gateway's answer to POST /v1/auth/nonce.
type nonceAnswer struct {
	Nonce     string `json:"nonce"`
	ExpiresAt string `json:"expiresAt"`
	Domain    string `json:"domain"`
	URI       string `json:"uri"`
	ChainID   uint64 `json:"chainId"`
}

// signIn signs in with the wallet key (EIP-4361) and keeps the session token
// for the next requests, in memory only.
func (a *account) signIn(ctx context.Context, key *ecdsa.PrivateKey, now time.Time) error {
	var n nonceAnswer
	if _, err := a.do(ctx, http.MethodPost, pathNonce, nil, http.StatusOK, &n); err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	// Sign only a message for the gateway the user named: a message for
	// another origin would be a sign-in there.
	uri, err := url.Parse(n.URI)
	switch {
	case !strings.EqualFold(n.Domain, a.base.Host):
		return fmt.Errorf("sign in: the gateway asks to sign in to %q (its public_url), not %s; not signing. "+
			"Pass --gateway with the origin of its public_url, or set every replica's public_url to the address clients use", oneLine(n.Domain, 100), a.base.Host)
	case err != nil || !sameOrigin(uri, a.base) || uri.User != nil:
		return fmt.Errorf("sign in: the gateway's sign-in URI is not on %s; not signing. "+
			"Pass --gateway with the origin of its public_url, or set every replica's public_url to the address clients use", a.base)
	case n.ChainID == 0:
		return errors.New("sign in: the gateway named no chain id")
	case n.Nonce == "" || !isToken(n.Nonce) || len(n.Nonce) > 128:
		return errors.New("sign in: the gateway's nonce is not a short token")
	}
	signer := exact.NewKeySigner(key)
	m := client.SignInMessage{
		Domain: n.Domain, Address: signer.Address(), Statement: signInStatement, URI: n.URI,
		Version: "1", ChainID: n.ChainID, Nonce: n.Nonce, IssuedAt: now.UTC().Format(time.RFC3339),
	}
	text := m.String()
	sig, err := client.SignText(ctx, signer, text)
	if err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	var v struct {
		Token     string `json:"token"`
		Account   string `json:"account"`
		ExpiresAt string `json:"expiresAt"`
	}
	body := map[string]string{"message": text, "signature": "0x" + hex.EncodeToString(sig)}
	if _, err := a.do(ctx, http.MethodPost, pathVerify, body, http.StatusOK, &v); err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	if v.Token == "" {
		return errors.New("sign in: the gateway gave no session token")
	}
	a.bearer = client.Secret(v.Token)
	return nil
}

// runKeys is `llm4agents keys create|list|revoke`.
func runKeys(ctx context.Context, args []string, e env) error {
	return runSubcommand(ctx, "keys", args, e, []subcommand{
		{"create", "create an sk-l4a- API key with optional caps, models and expiry; shown once", keysCreate},
		{"list", "list the account's keys and their limits", keysList},
		{"revoke", "revoke a key by its id, as list shows it", keysRevoke},
	})
}

// subcommand is one word of a command with subcommands (keys, credits).
type subcommand struct {
	name    string
	summary string // one line for the command's usage
	run     func(ctx context.Context, args []string, e env) error
}

// runSubcommand runs the subcommand args[0] names, with the rest of args.
// -h, -help, --help or help prints the command's usage to stderr, as a
// FlagSet does, and returns flag.ErrHelp. A missing or unknown subcommand is
// an error naming those there are; the unknown word is shown on one line, cut
// short.
func runSubcommand(ctx context.Context, cmd string, args []string, e env, subs []subcommand) error {
	names := make([]string, len(subs))
	for i, sc := range subs {
		names[i] = sc.name
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	usage := func() {
		printf(e.stderr, "usage: llm4agents %s %s [flags]\n\nsubcommands:\n", cmd, strings.Join(names, "|"))
		for _, sc := range subs {
			printf(e.stderr, "  %-10s %s\n", sc.name, sc.summary)
		}
		printf(e.stderr, "\nRun 'llm4agents %s <subcommand> -h' for the flags of a subcommand.\n", cmd)
	}
	if len(args) == 0 {
		usage()
		return fmt.Errorf("%s: a subcommand is required: %s", cmd, want)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage()
		return flag.ErrHelp
	}
	for _, sc := range subs {
		if sc.name == args[0] {
			return sc.run(ctx, args[1:], e)
		}
	}
	return fmt.Errorf("%s: unknown subcommand %q: want %s", cmd, oneLine(args[0], 40), want)
}

// keyView is a key as the gateway shows it to its owner.
type keyView struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	Key           string   `json:"key,omitempty"`
	Name          string   `json:"name"`
	Account       string   `json:"account"`
	TotalCap      *string  `json:"totalCap"`
	PeriodCap     *string  `json:"periodCap"`
	PeriodSeconds *int64   `json:"periodSeconds"`
	ExpiresAt     *string  `json:"expiresAt"`
	Models        []string `json:"models"`
	RatePerMinute int      `json:"ratePerMinute"`
	CreatedAt     string   `json:"createdAt"`
	RevokedAt     *string  `json:"revokedAt"`
}

// signedIn parses the shared flags, reads the wallet key and signs in.
func signedIn(ctx context.Context, f *accountFlags, e env) (*account, error) {
	if err := f.check(e.getenv); err != nil {
		return nil, err
	}
	key, err := loadWallet(f.keyFile, e.getenv, e.stderr)
	if err != nil {
		return nil, err
	}
	a := newAccount(f)
	if err := a.signIn(ctx, key, time.Now()); err != nil {
		return nil, err
	}
	return a, nil
}

func keysCreate(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, true, true)
	var name, totalCap, periodCap, expires string
	var period time.Duration
	var models listFlag
	var rate int
	fs.StringVar(&name, "name", "", "a name for the key, to tell it apart in the list")
	fs.StringVar(&totalCap, "total-cap", "", "most the key may spend in all: whole tokens (1.5) or atomic units (1500000)")
	fs.StringVar(&periodCap, "period-cap", "", "most the key may spend per --period, in the same form")
	fs.DurationVar(&period, "period", 0, "the period of --period-cap, such as 24h")
	fs.StringVar(&expires, "expires", "", "when the key stops working: an RFC 3339 time or a duration from now, such as 720h")
	fs.Var(&models, "model", "a model the key may use (repeatable; default: any)")
	fs.IntVar(&rate, "rate", 0, "most requests per minute (0: no limit)")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("keys create: takes no arguments, only flags")
	}
	req, err := keyRequest(name, totalCap, periodCap, period, expires, models, rate, f.decimals, time.Now())
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := signedIn(ctx, &f, e)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	var k keyView
	raw, err := a.do(ctx, http.MethodPost, pathKeys, req, http.StatusCreated, &k)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	if !strings.HasPrefix(k.Key, "sk-l4a-") {
		return errors.New("keys create: the gateway's answer holds no sk-l4a- key")
	}
	printf(e.stderr, "llm4agents: this API key is shown once and cannot be shown again: store it now, readable only by you. Anyone who holds it can spend this account's credit.\n")
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "%s\n", k.Key)
	printf(e.stderr, "created key %s %s\n", k.ID, describeKey(&k, f.decimals))
	return nil
}

// keyRequest builds the body of POST /v1/keys from the flags.
func keyRequest(name, totalCap, periodCap string, period time.Duration, expires string, models []string, rate, decimals int, now time.Time) (map[string]any, error) {
	req := map[string]any{"name": name}
	if rate < 0 {
		return nil, errors.New("--rate must not be negative")
	}
	if rate > 0 {
		req["ratePerMinute"] = rate
	}
	if totalCap != "" {
		n, err := parseAmount(totalCap, decimals)
		if err != nil {
			return nil, fmt.Errorf("--total-cap: %w", err)
		}
		req["totalCap"] = n.String()
	}
	switch {
	case (periodCap == "") != (period == 0):
		return nil, errors.New("--period-cap and --period go together")
	case period < 0 || period%time.Second != 0:
		return nil, errors.New("--period must be a positive whole number of seconds, such as 24h")
	case periodCap != "":
		n, err := parseAmount(periodCap, decimals)
		if err != nil {
			return nil, fmt.Errorf("--period-cap: %w", err)
		}
		req["periodCap"], req["periodSeconds"] = n.String(), int64(period/time.Second)
	}
	if expires != "" {
		t, err := time.Parse(time.RFC3339, expires)
		if err != nil {
			d, derr := time.ParseDuration(expires)
			if derr != nil || d <= 0 {
				return nil, errors.New("--expires is neither an RFC 3339 time nor a positive duration")
			}
			t = now.Add(d)
		}
		req["expiresAt"] = t.UTC().Format(time.RFC3339)
	}
	if len(models) > 0 {
		req["models"] = models
	}
	return req, nil
}

// describeKey says in one line what a key may do.
func describeKey(k *keyView, decimals int) string {
	var parts []string
	if k.Name != "" {
		parts = append(parts, fmt.Sprintf("%q", oneLine(k.Name, 64)))
	}
	amount := func(s *string) string {
		n, err := exact.ParseUint256(*s)
		if err != nil {
			return "?"
		}
		return formatAmount(n, decimals)
	}
	if k.TotalCap != nil {
		parts = append(parts, "total cap "+amount(k.TotalCap))
	}
	if k.PeriodCap != nil && k.PeriodSeconds != nil {
		parts = append(parts, fmt.Sprintf("%s per %v", amount(k.PeriodCap), time.Duration(*k.PeriodSeconds)*time.Second))
	}
	if len(k.Models) > 0 {
		parts = append(parts, "models "+oneLine(strings.Join(k.Models, ","), 200))
	}
	if k.RatePerMinute > 0 {
		parts = append(parts, strconv.Itoa(k.RatePerMinute)+"/min")
	}
	if k.ExpiresAt != nil {
		parts = append(parts, "expires "+oneLine(*k.ExpiresAt, 40))
	}
	if k.RevokedAt != nil {
		parts = append(parts, "REVOKED "+oneLine(*k.RevokedAt, 40))
	}
	if len(parts) == 0 {
		return "(no limits)"
	}
	return strings.Join(parts, "; ")
}

func keysList(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("keys list", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, true, true)
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("keys list: takes no arguments, only flags")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := signedIn(ctx, &f, e)
	if err != nil {
		return fmt.Errorf("keys list: %w", err)
	}
	var list struct {
		Data []keyView `json:"data"`
	}
	raw, err := a.do(ctx, http.MethodGet, pathKeys, nil, http.StatusOK, &list)
	if err != nil {
		return fmt.Errorf("keys list: %w", err)
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	if len(list.Data) == 0 {
		printf(e.stdout, "no keys\n")
	}
	for _, k := range list.Data {
		printf(e.stdout, "%s  %s\n", oneLine(k.ID, 80), describeKey(&k, f.decimals))
	}
	return nil
}

func keysRevoke(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("keys revoke", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, true, true)
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || !isToken(pos[0]) || strings.ContainsAny(pos[0], "/?#%") || len(pos[0]) > 128 {
		return errors.New("keys revoke: give one key id, as keys list shows it")
	}
	id := pos[0]
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := signedIn(ctx, &f, e)
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	var k keyView
	raw, err := a.do(ctx, http.MethodDelete, pathKeys+"/"+url.PathEscape(id), nil, http.StatusOK, &k)
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "revoked %s %s\n", oneLine(k.ID, 80), describeKey(&k, f.decimals))
	return nil
}
