package client

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// The account routes of an llm4agents gateway, relative to its origin.
const (
	PathNonce    = "/v1/auth/nonce"
	PathVerify   = "/v1/auth/verify"
	PathKeys     = "/v1/keys"
	PathTopUp    = "/v1/credits/topup"
	PathBalance  = "/v1/credits/balance"
	PathReceipts = "/v1/receipts"
)

// SignInStatement is the statement of the EIP-4361 message Account.SignIn
// signs.
const SignInStatement = "Sign in to llm4agents to manage API keys and credits."

// maxAccountBody bounds an answer of the account routes.
const maxAccountBody = 1 << 20

// ErrSignInOrigin is wrapped by the error of Account.SignIn when the gateway
// asks for a signature for another origin than Account.Base: signing it would
// be a sign-in there, so nothing is signed. A gateway behind a proxy answers
// so when its public_url is not the address the client uses.
var ErrSignInOrigin = errors.New("client: the sign-in is for another origin")

// Account calls the account routes of an llm4agents gateway (sign-in, API
// keys, credits, receipts) as one wallet or one API key. Its zero value is
// not usable: Base must be set. It is not safe for concurrent use while
// SignIn runs.
type Account struct {
	// Base is the gateway's origin, such as https://gw.example.com; the
	// routes are resolved against it, and SignIn signs only a message for
	// it.
	Base *url.URL
	// Client sends the requests; nil means http.DefaultClient. To pay a
	// top-up (TopUp), its transport must be a Transport. A client that
	// follows redirects to another origin would carry the Token there:
	// refuse them in its CheckRedirect.
	Client *http.Client
	// Token is sent as the Authorization bearer: the session token SignIn
	// sets, or an sk-l4a- API key. Empty sends none.
	Token Secret
}

// APIError is an answer of the gateway other than the one asked for. Code and
// Message are the gateway's OpenAI-style error fields, cut to one short line
// of printable characters so a hostile gateway cannot draw on a terminal.
type APIError struct {
	Route   string // method and path, such as "GET /v1/keys"
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s: the gateway answered %d %s", e.Route, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Do sends method path (relative to Base, with its query) with body encoded
// as JSON (nil: no body) and Token as the bearer. When the answer has status
// want it decodes it into out (nil: not decoded) and returns it as it came;
// any other status is an *APIError. Errors never repeat the URL's query or
// the Token.
func (a *Account) Do(ctx context.Context, method, path string, body any, want int, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := x402.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Base.String()+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token.Reveal())
	}
	hc := a.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its message repeats the whole URL
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAccountBody+1))
	if err == nil && len(b) > maxAccountBody {
		err = fmt.Errorf("larger than %d bytes", maxAccountBody)
	}
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
	ae := &APIError{Route: route, Status: status}
	if json.Unmarshal(body, &e) == nil {
		ae.Code, ae.Message = OneLine(e.Error.Code, 64), OneLine(e.Error.Message, 300)
	}
	return ae
}

// OneLine keeps at most n bytes of s, then "...", on one line of printable
// characters: control characters become spaces. Text a gateway sends goes
// through it before a terminal shows it.
func OneLine(s string, n int) string {
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

// nonceAnswer is the gateway's answer to POST PathNonce.
type nonceAnswer struct {
	Nonce     string `json:"nonce"`
	ExpiresAt string `json:"expiresAt"`
	Domain    string `json:"domain"`
	URI       string `json:"uri"`
	ChainID   uint64 `json:"chainId"`
}

// SignIn signs in with the wallet s (EIP-4361, with SignInStatement, issued
// at now) and keeps the session token in Token, in memory only. It signs only
// a message for Base's origin: a message for another (ErrSignInOrigin) would
// be a sign-in there.
func (a *Account) SignIn(ctx context.Context, s exact.Signer, now time.Time) error {
	var n nonceAnswer
	if _, err := a.Do(ctx, http.MethodPost, PathNonce, nil, http.StatusOK, &n); err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	uri, err := url.Parse(n.URI)
	switch {
	case !strings.EqualFold(n.Domain, a.Base.Host):
		return fmt.Errorf("sign in: the gateway asks to sign in to %q (its public_url), not %s; not signing%w",
			OneLine(n.Domain, 100), a.Base.Host, quiet{ErrSignInOrigin})
	case err != nil || !sameOrigin(uri, a.Base) || uri.User != nil:
		return fmt.Errorf("sign in: the gateway's sign-in URI is not on %s; not signing%w", a.Base, quiet{ErrSignInOrigin})
	case n.ChainID == 0:
		return errors.New("sign in: the gateway named no chain id")
	case n.Nonce == "" || !alphanumeric(n.Nonce) || len(n.Nonce) > 128:
		// EIP-4361 nonces are alphanumeric.
		return errors.New("sign in: the gateway's nonce is not a short token")
	}
	m := SignInMessage{
		Domain: n.Domain, Address: s.Address(), Statement: SignInStatement, URI: n.URI,
		Version: "1", ChainID: n.ChainID, Nonce: n.Nonce, IssuedAt: now.UTC().Format(time.RFC3339),
	}
	text := m.String()
	sig, err := SignText(ctx, s, text)
	if err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	var v struct {
		Token     string `json:"token"`
		Account   string `json:"account"`
		ExpiresAt string `json:"expiresAt"`
	}
	body := map[string]string{"message": text, "signature": "0x" + hex.EncodeToString(sig)}
	if _, err := a.Do(ctx, http.MethodPost, PathVerify, body, http.StatusOK, &v); err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	if v.Token == "" {
		return errors.New("sign in: the gateway gave no session token")
	}
	a.Token = Secret(v.Token)
	return nil
}

// quiet wraps a sentinel so that it is found by errors.Is but adds nothing to
// the message.
type quiet struct{ err error }

func (q quiet) Error() string { return "" }
func (q quiet) Unwrap() error { return q.err }

// KeyRequest is what POST PathKeys creates: an sk-l4a- API key of the signed-in
// account with optional limits. Amounts are atomic units of the credit asset,
// as decimal strings; zero values are left out (no limit).
type KeyRequest struct {
	Name string `json:"name"`
	// TotalCap is the most the key may spend in all.
	TotalCap string `json:"totalCap,omitempty"`
	// PeriodCap is the most it may spend per PeriodSeconds; the two go
	// together.
	PeriodCap     string `json:"periodCap,omitempty"`
	PeriodSeconds int64  `json:"periodSeconds,omitempty"`
	// ExpiresAt is when the key stops working, in RFC 3339.
	ExpiresAt string `json:"expiresAt,omitempty"`
	// Models are the models the key may use; none means any.
	Models []string `json:"models,omitempty"`
	// RatePerMinute is the most requests per minute, TokensPerMinute the
	// most tokens (each call counts its prompt plus max_tokens), across
	// every replica; 0 means no limit.
	RatePerMinute   int   `json:"ratePerMinute,omitempty"`
	TokensPerMinute int64 `json:"tokensPerMinute,omitempty"`
}

// Key is an API key as the gateway shows it to its owner. Key holds the
// secret only in the answer to CreateKey, the one time it is shown. Amounts
// are atomic units as decimal strings, as the gateway sent them; nil fields
// are no limit.
type Key struct {
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
	// TokensPerMinute is absent from gateways that predate it: 0.
	TokensPerMinute int64   `json:"tokensPerMinute"`
	CreatedAt       string  `json:"createdAt"`
	RevokedAt       *string `json:"revokedAt"`
}

// The typed calls below return the decoded answer and the answer as it came,
// for a caller that shows or keeps it verbatim.

// CreateKey creates an API key (signed in only). The answer's Key is the
// secret, shown this once.
func (a *Account) CreateKey(ctx context.Context, req *KeyRequest) (*Key, []byte, error) {
	var k Key
	raw, err := a.Do(ctx, http.MethodPost, PathKeys, req, http.StatusCreated, &k)
	if err != nil {
		return nil, nil, err
	}
	return &k, raw, nil
}

// Keys lists the account's keys (signed in only).
func (a *Account) Keys(ctx context.Context) ([]Key, []byte, error) {
	var list struct {
		Data []Key `json:"data"`
	}
	raw, err := a.Do(ctx, http.MethodGet, PathKeys, nil, http.StatusOK, &list)
	if err != nil {
		return nil, nil, err
	}
	return list.Data, raw, nil
}

// RevokeKey revokes the key with id, as Keys shows it (signed in only).
func (a *Account) RevokeKey(ctx context.Context, id string) (*Key, []byte, error) {
	var k Key
	raw, err := a.Do(ctx, http.MethodDelete, PathKeys+"/"+url.PathEscape(id), nil, http.StatusOK, &k)
	if err != nil {
		return nil, nil, err
	}
	return &k, raw, nil
}

// KeyUpdate is what PATCH PathKeys/{id} changes; a nil field keeps the
// key's value. TotalCap, PeriodCap and ExpiresAt pointing at "" remove the
// limit (the gateway is sent JSON null; an empty PeriodCap removes the period
// too). A non-nil empty Models allows every model; RatePerMinute or
// TokensPerMinute pointing at 0 removes that limit. Amounts and times are in
// the forms of KeyRequest.
type KeyUpdate struct {
	Name            *string
	TotalCap        *string
	PeriodCap       *string
	PeriodSeconds   *int64
	ExpiresAt       *string
	Models          []string
	RatePerMinute   *int
	TokensPerMinute *int64
}

// MarshalJSON sends only the fields set, and null for a limit removed: the
// gateway tells an absent member (keep) from a null one (remove).
func (u KeyUpdate) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	orNull := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	if u.Name != nil {
		m["name"] = *u.Name
	}
	if u.TotalCap != nil {
		m["totalCap"] = orNull(*u.TotalCap)
	}
	switch {
	case u.PeriodCap != nil && *u.PeriodCap == "":
		m["periodCap"], m["periodSeconds"] = nil, nil
	default:
		if u.PeriodCap != nil {
			m["periodCap"] = *u.PeriodCap
		}
		if u.PeriodSeconds != nil {
			m["periodSeconds"] = *u.PeriodSeconds
		}
	}
	if u.ExpiresAt != nil {
		m["expiresAt"] = orNull(*u.ExpiresAt)
	}
	if u.Models != nil {
		m["models"] = u.Models
	}
	if u.RatePerMinute != nil {
		m["ratePerMinute"] = *u.RatePerMinute
	}
	if u.TokensPerMinute != nil {
		m["tokensPerMinute"] = *u.TokensPerMinute
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode key update: %w", err)
	}
	return b, nil
}

// UpdateKey changes the limits of the key with id, as Keys shows it (signed
// in only), and returns the key as changed. A revoked key cannot change.
func (a *Account) UpdateKey(ctx context.Context, id string, u *KeyUpdate) (*Key, []byte, error) {
	var k Key
	raw, err := a.Do(ctx, http.MethodPatch, PathKeys+"/"+url.PathEscape(id), u, http.StatusOK, &k)
	if err != nil {
		return nil, nil, err
	}
	return &k, raw, nil
}

// Balance is the account's credit: the balance, and what calls in progress
// hold of it, in atomic units of Asset as decimal strings.
type Balance struct {
	Account string `json:"account"`
	Asset   string `json:"asset"`
	Balance string `json:"balance"`
	Held    string `json:"held"`
}

// Balance returns the account's credit (signed in, or with an API key).
func (a *Account) Balance(ctx context.Context) (*Balance, []byte, error) {
	var b Balance
	raw, err := a.Do(ctx, http.MethodGet, PathBalance, nil, http.StatusOK, &b)
	if err != nil {
		return nil, nil, err
	}
	return &b, raw, nil
}

// TopUp is the gateway's answer to a paid top-up: what was credited to which
// account, the balance after it, in atomic units as decimal strings, the
// transaction that paid it and the ledger entry.
type TopUp struct {
	Account     string          `json:"account"`
	Credited    string          `json:"credited"`
	Balance     string          `json:"balance"`
	Transaction string          `json:"transaction"`
	LedgerSeq   json.RawMessage `json:"ledger_seq"`
}

// TopUp asks to add amount atomic units of credit and pays the 402 the
// gateway answers with: Client's transport must be a Transport, whose Policy
// bounds the payment. The paying wallet's account is credited; no sign-in is
// needed.
func (a *Account) TopUp(ctx context.Context, amount *big.Int) (*TopUp, []byte, error) {
	var t TopUp
	raw, err := a.Do(ctx, http.MethodPost, PathTopUp, map[string]string{"amount": amount.String()}, http.StatusOK, &t)
	if err != nil {
		return nil, nil, err
	}
	return &t, raw, nil
}

// Receipt returns the signed receipt of the credit-paid call with request id
// id, as the envelope {receipt, signature} (receipt.ParseEnvelope reads it).
func (a *Account) Receipt(ctx context.Context, id string) ([]byte, error) {
	return a.Do(ctx, http.MethodGet, PathReceipts+"/"+url.PathEscape(id), nil, http.StatusOK, nil)
}

// Receipts returns the latest limit receipts of credit-paid calls, newest
// first, as envelopes. Signed in, they are every key's of the account, or only
// those of the key keyID when it is not empty; with an API key, those of that
// key's own calls.
func (a *Account) Receipts(ctx context.Context, limit int, keyID string) ([]json.RawMessage, error) {
	return a.ReceiptsBefore(ctx, limit, keyID, 0)
}

// ReceiptsBefore is Receipts for the page before the cursor before (0: the
// newest); ReceiptsPage also returns the next page's cursor.
func (a *Account) ReceiptsBefore(ctx context.Context, limit int, keyID string, before int64) ([]json.RawMessage, error) {
	data, _, err := a.ReceiptsPage(ctx, limit, keyID, before)
	return data, err
}

// ReceiptsPage returns the page of receipts before the cursor before (0:
// the newest) and the cursor of the page after it, 0 when this page is the
// last. The cursor is the gateway's order of receipts, not a receipt's
// ledgerSeq (an x402 payment's or a leased call's differs from it).
func (a *Account) ReceiptsPage(ctx context.Context, limit int, keyID string, before int64) ([]json.RawMessage, int64, error) {
	var list struct {
		Data       []json.RawMessage `json:"data"`
		HasMore    bool              `json:"has_more"`
		NextBefore int64             `json:"next_before"`
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if keyID != "" {
		q.Set("key_id", keyID)
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if _, err := a.Do(ctx, http.MethodGet, PathReceipts+"?"+q.Encode(), nil, http.StatusOK, &list); err != nil {
		return nil, 0, err
	}
	if !list.HasMore {
		list.NextBefore = 0
	}
	return list.Data, list.NextBefore, nil
}
