package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

const (
	// gatewayEnv may name the gateway instead of --gateway.
	gatewayEnv = "LLM4AGENTS_GATEWAY"
	// apiKeyEnv may hold an sk-l4a- key for the commands that accept one.
	apiKeyEnv = "LLM4AGENTS_API_KEY" // #nosec G101 -- the name of the variable, not a key
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

// newAccount returns the account client of the gateway the flags name. It
// follows redirects within that origin only, so the bearer never goes
// elsewhere.
func newAccount(f *accountFlags) *client.Account {
	return &client.Account{Base: f.base, Client: &http.Client{Timeout: f.timeout, CheckRedirect: sameOriginRedirects}}
}

// oneLine is client.OneLine: text from the gateway on one short line of
// printable characters.
func oneLine(s string, n int) string { return client.OneLine(s, n) }

// runKeys is `llm4agents keys create|list|update|revoke`.
func runKeys(ctx context.Context, args []string, e env) error {
	return runSubcommand(ctx, "keys", args, e, []subcommand{
		{"create", "create an sk-l4a- API key with optional caps, models and expiry; shown once", keysCreate},
		{"list", "list the account's keys and their limits", keysList},
		{"update", "change a key's caps, rates, models, name or expiry, by its id; \"none\" removes a cap", keysUpdate},
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
	width := 10
	for i, sc := range subs {
		names[i] = sc.name
		width = max(width, len(sc.name))
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	usage := func() {
		printf(e.stderr, "usage: llm4agents %s %s [flags]\n\nsubcommands:\n", cmd, strings.Join(names, "|"))
		for _, sc := range subs {
			printf(e.stderr, "  %-*s %s\n", width, sc.name, sc.summary)
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

// signedIn parses the shared flags, reads the wallet key and signs in.
func signedIn(ctx context.Context, f *accountFlags, e env) (*client.Account, error) {
	if err := f.check(e.getenv); err != nil {
		return nil, err
	}
	key, err := loadWallet(f.keyFile, e.getenv, e.stderr)
	if err != nil {
		return nil, err
	}
	a := newAccount(f)
	if err := a.SignIn(ctx, exact.NewKeySigner(key), time.Now()); err != nil {
		if errors.Is(err, client.ErrSignInOrigin) {
			err = fmt.Errorf("%w. Pass --gateway with the origin of its public_url, or set every replica's public_url to the address clients use", err)
		}
		return nil, err
	}
	return a, nil
}

func keysCreate(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, true, true)
	var k keyFlags
	k.register(fs, false)
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("keys create: takes no arguments, only flags")
	}
	req, err := keyRequest(&k, f.decimals, time.Now())
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := signedIn(ctx, &f, e)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	created, raw, err := a.CreateKey(ctx, req)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	if !strings.HasPrefix(created.Key, "sk-l4a-") {
		return errors.New("keys create: the gateway's answer holds no sk-l4a- key")
	}
	printf(e.stderr, "llm4agents: this API key is shown once and cannot be shown again: store it now, readable only by you. Anyone who holds it can spend this account's credit.\n")
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "%s\n", created.Key)
	printf(e.stderr, "created key %s %s\n", created.ID, describeKey(created, f.decimals))
	return nil
}

// keyFlags are the flags that name a key and set its limits, shared by
// keys create and keys update.
type keyFlags struct {
	name, totalCap, periodCap, expires string
	period                             time.Duration
	models                             listFlag
	anyModel                           bool // keys update only
	rate                               int
	tokens                             int64
}

// register adds the flags to fs. For keys update (update), "none" removes
// a limit, --model replaces the key's models and --any-model clears them.
func (k *keyFlags) register(fs *flag.FlagSet, update bool) {
	orNone, models := "", "a model the key may use (repeatable; default: any)"
	if update {
		orNone, models = ", or none", "a model the key may use (repeatable): replaces the key's models"
		fs.BoolVar(&k.anyModel, "any-model", false, "let the key use every model")
	}
	fs.StringVar(&k.name, "name", "", "a name for the key, to tell it apart in the list")
	fs.StringVar(&k.totalCap, "total-cap", "", "most the key may spend in all: whole tokens (1.5) or atomic units (1500000)"+orNone)
	fs.StringVar(&k.periodCap, "period-cap", "", "most the key may spend per --period, in the same form"+orNone)
	fs.DurationVar(&k.period, "period", 0, "the period of --period-cap, such as 24h")
	fs.StringVar(&k.expires, "expires", "", "when the key stops working: an RFC 3339 time or a duration from now, such as 720h"+orNone)
	fs.Var(&k.models, "model", models)
	fs.IntVar(&k.rate, "rate", 0, "most requests per minute, across every replica (0: no limit)")
	fs.Int64Var(&k.tokens, "tokens-per-minute", 0, "most tokens per minute, across every replica: each call counts its prompt plus max_tokens (0: no limit)")
}

// maxTokensPerMinute is the gateway's bound on a key's tokens per minute,
// checked here too, so a request the gateway would refuse is not sent.
const maxTokensPerMinute = 10_000_000_000

// keyRequest builds the key to create from the flags.
func keyRequest(k *keyFlags, decimals int, now time.Time) (*client.KeyRequest, error) {
	req := &client.KeyRequest{Name: k.name, RatePerMinute: k.rate, TokensPerMinute: k.tokens, Models: k.models}
	if err := checkRates(k.rate, k.tokens); err != nil {
		return nil, err
	}
	var err error
	if k.totalCap != "" {
		if req.TotalCap, err = capAmount("total-cap", k.totalCap, decimals); err != nil {
			return nil, err
		}
	}
	if (k.periodCap == "") != (k.period == 0) {
		return nil, errors.New("--period-cap and --period go together")
	}
	if k.periodCap != "" {
		if req.PeriodCap, req.PeriodSeconds, err = periodLimit(k.periodCap, k.period, decimals); err != nil {
			return nil, err
		}
	}
	if k.expires != "" {
		if req.ExpiresAt, err = expiryTime(k.expires, now); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// checkRates checks --rate and --tokens-per-minute.
func checkRates(rate int, tokens int64) error {
	if rate < 0 {
		return errors.New("--rate must not be negative")
	}
	if tokens < 0 || tokens > maxTokensPerMinute {
		return fmt.Errorf("--tokens-per-minute must be 0 (no limit) to %d", int64(maxTokensPerMinute))
	}
	return nil
}

// capAmount parses the value of the cap flag name: whole tokens or atomic
// units, returned as atomic units.
func capAmount(name, v string, decimals int) (string, error) {
	n, err := parseAmount(v, decimals)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", name, err)
	}
	return n.String(), nil
}

// periodLimit parses --period-cap and --period (both given).
func periodLimit(periodCap string, period time.Duration, decimals int) (string, int64, error) {
	if period <= 0 || period%time.Second != 0 {
		return "", 0, errors.New("--period must be a positive whole number of seconds, such as 24h")
	}
	n, err := capAmount("period-cap", periodCap, decimals)
	if err != nil {
		return "", 0, err
	}
	return n, int64(period / time.Second), nil
}

// expiryTime parses --expires: an RFC 3339 time or a duration from now.
func expiryTime(v string, now time.Time) (string, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d <= 0 {
			return "", errors.New("--expires is neither an RFC 3339 time nor a positive duration")
		}
		t = now.Add(d)
	}
	return t.UTC().Format(time.RFC3339), nil
}

// noLimit is the value of a limit flag of keys update that removes the limit.
const noLimit = "none"

// keyUpdate builds the change keys update asks for from the flags given
// (set, by name); an error if it names none.
func keyUpdate(set map[string]bool, k *keyFlags, decimals int, now time.Time) (*client.KeyUpdate, error) {
	if len(set) == 0 {
		return nil, errors.New("nothing to change: give at least one of --name, --total-cap, --period-cap with --period, --expires, --model, --any-model, --rate, --tokens-per-minute")
	}
	u := &client.KeyUpdate{}
	if set["name"] {
		u.Name = &k.name
	}
	if err := checkRates(k.rate, k.tokens); err != nil {
		return nil, err
	}
	if set["rate"] {
		u.RatePerMinute = &k.rate
	}
	if set["tokens-per-minute"] {
		u.TokensPerMinute = &k.tokens
	}
	if set["total-cap"] {
		v := "" // none: the client sends null
		if k.totalCap != noLimit {
			var err error
			if v, err = capAmount("total-cap", k.totalCap, decimals); err != nil {
				return nil, err
			}
		}
		u.TotalCap = &v
	}
	switch {
	case set["period-cap"] && k.periodCap == noLimit:
		if set["period"] {
			return nil, errors.New("--period-cap none takes no --period")
		}
		v := ""
		u.PeriodCap = &v
	case set["period-cap"] != set["period"]:
		return nil, errors.New("--period-cap and --period go together")
	case set["period-cap"]:
		c, p, err := periodLimit(k.periodCap, k.period, decimals)
		if err != nil {
			return nil, err
		}
		u.PeriodCap, u.PeriodSeconds = &c, &p
	}
	if set["expires"] {
		v := ""
		if k.expires != noLimit {
			var err error
			if v, err = expiryTime(k.expires, now); err != nil {
				return nil, err
			}
		}
		u.ExpiresAt = &v
	}
	switch {
	case k.anyModel && set["model"]:
		return nil, errors.New("--any-model and --model exclude each other")
	case k.anyModel:
		u.Models = []string{}
	case set["model"]:
		if len(k.models) == 0 {
			return nil, errors.New("--model is empty: use --any-model to allow every model")
		}
		u.Models = k.models
	}
	return u, nil
}

// describeKey says in one line what a key may do.
func describeKey(k *client.Key, decimals int) string {
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
	if k.TokensPerMinute > 0 {
		parts = append(parts, strconv.FormatInt(k.TokensPerMinute, 10)+" tokens/min")
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
	keys, raw, err := a.Keys(ctx)
	if err != nil {
		return fmt.Errorf("keys list: %w", err)
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	if len(keys) == 0 {
		printf(e.stdout, "no keys\n")
	}
	for _, k := range keys {
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
	id, err := keyIDArg(pos)
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := signedIn(ctx, &f, e)
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	k, raw, err := a.RevokeKey(ctx, id)
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "revoked %s %s\n", oneLine(k.ID, 80), describeKey(k, f.decimals))
	return nil
}

// keyIDArg returns the one key id of pos, as keys list shows it.
func keyIDArg(pos []string) (string, error) {
	if len(pos) != 1 || !isToken(pos[0]) || strings.ContainsAny(pos[0], "/?#%") || len(pos[0]) > 128 {
		return "", errors.New("give one key id, as keys list shows it")
	}
	return pos[0], nil
}

func keysUpdate(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("keys update", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, true, true)
	// The limit flags, whose presence says what changes; the shared ones
	// (gateway, key-file, ...) change nothing.
	var k keyFlags
	limits := flag.NewFlagSet("", flag.ContinueOnError)
	k.register(limits, true)
	limits.VisitAll(func(fl *flag.Flag) { fs.Var(fl.Value, fl.Name, fl.Usage) })
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	id, err := keyIDArg(pos)
	if err != nil {
		return fmt.Errorf("keys update: %w", err)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		if limits.Lookup(fl.Name) != nil {
			set[fl.Name] = true
		}
	})
	u, err := keyUpdate(set, &k, f.decimals, time.Now())
	if err != nil {
		return fmt.Errorf("keys update: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := signedIn(ctx, &f, e)
	if err != nil {
		return fmt.Errorf("keys update: %w", err)
	}
	updated, raw, err := a.UpdateKey(ctx, id, u)
	if err != nil {
		return fmt.Errorf("keys update: %w", err)
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "updated %s %s\n", oneLine(updated.ID, 80), describeKey(updated, f.decimals))
	return nil
}
