package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Test fixtures: the official express server's offer on chain 1337 (as
// @x402/express 2.27 sends it), and a clock shared by the signer and the server's verifier.
const (
	network = "eip155:1337"
	token   = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	payTo   = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	price   = 10000
	// facilitator is the address an upto offer names as the one allowed to
	// settle (anvil's dev account 9).
	facilitator = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
)

var testNow = time.Unix(1_800_000_000, 0)

// offer returns an exact requirement for amount atomic units of token, changed
// by the options.
func offer(amount int64, opts ...func(*x402.PaymentRequirements)) x402.PaymentRequirements {
	r := x402.PaymentRequirements{
		Scheme:            "exact",
		Network:           network,
		Amount:            fmt.Sprint(amount),
		Asset:             token,
		PayTo:             payTo,
		MaxTimeoutSeconds: 60,
		Extra:             json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func withScheme(s string) func(*x402.PaymentRequirements) {
	return func(r *x402.PaymentRequirements) { r.Scheme = s }
}

func withNetwork(n string) func(*x402.PaymentRequirements) {
	return func(r *x402.PaymentRequirements) { r.Network = n }
}

func withAsset(a string) func(*x402.PaymentRequirements) {
	return func(r *x402.PaymentRequirements) { r.Asset = a }
}

func withExtra(e string) func(*x402.PaymentRequirements) {
	return func(r *x402.PaymentRequirements) { r.Extra = json.RawMessage(e) }
}

// policy allows token on chain 1337, at most one price per request, within a
// budget of n prices.
func policy(n int64) client.Policy {
	return client.Policy{
		MaxPerRequest: big.NewInt(price),
		Budget:        big.NewInt(n * price),
		Assets:        []client.Asset{{Network: network, Address: token}},
	}
}

// afterPay is how the fake server answers a request that carries a valid
// payment.
type afterPay int

const (
	paidOK             afterPay = iota // 200 + PAYMENT-RESPONSE success
	paidNoSettleHeader                 // 201, no PAYMENT-RESPONSE
	paidGarbageSettle                  // 200 + an undecodable PAYMENT-RESPONSE
	paid402Again                       // 402 + PAYMENT-REQUIRED, as after a failed verify
	paidSettleFailed                   // 402 + PAYMENT-RESPONSE success:false
	paidSettlePending                  // 402 + PAYMENT-RESPONSE settlement_pending
	paidHandler500                     // 500, no settlement
	paidHangUp                         // the connection is closed without an answer
	paidRedirect                       // 307 to redirectTo + PAYMENT-RESPONSE success
	paidInUse                          // 409 with Retry-After, as the gateway answers a twin in flight
	paidConflict                       // 409 without Retry-After
	// paidUptoStream is 200 text/event-stream without PAYMENT-RESPONSE,
	// whose last chunk names the charge in x_llm4agents (settleAmount, of
	// the maximum), as the gateway delivers an upto stream, then settles it.
	paidUptoStream
)

// seen is one request as the fake server received it.
type seen struct {
	Method, Path string
	Body         string
	Payment      string // PAYMENT-SIGNATURE
	Legacy       string // X-PAYMENT
	SignIn       string // SIGN-IN-WITH-X
	ID           string // payment-identifier id of a valid payment
	Nonce        string // authorization nonce of a valid payment
}

// server is a small x402 v2 resource server: it answers 402 with a
// PAYMENT-REQUIRED header listing accepts, and checks a PAYMENT-SIGNATURE as a
// real one would (decode, match accepted, EIP-712 signature, time window, value)
// with exact.Verifier.Check, before answering as after says.
type server struct {
	tb         testing.TB
	srv        *httptest.Server
	accepts    []x402.PaymentRequirements
	required   *string // PAYMENT-REQUIRED value instead of the encoded accepts; "" for none
	after      afterPay
	free       bool              // never ask for payment
	redirectTo string            // for paidRedirect
	routes     map[string]string // path -> where it redirects (302), before any payment
	extensions map[string]json.RawMessage
	verifier   *exact.Verifier
	upto       *upto.Verifier
	// settleAmount, when set, is the amount a successful PAYMENT-RESPONSE
	// reports, as an upto server charging less than the maximum does.
	settleAmount *string
	// siwx, when set, makes every 402 offer sign-in-with-x as the official
	// server does (a fresh nonce each time), built by siwx from the request;
	// a valid proof from an address in signedIn is answered 200 unpaid.
	siwx     func(r *http.Request, nonce string) json.RawMessage
	signedIn map[string]bool // lower-case addresses that "already paid"
	// signInRedirect, when set, answers a granted sign-in with a 302 there.
	signInRedirect string

	mu sync.Mutex
	// script, when not empty, overrides after for the next valid payments, one
	// entry each.
	script   []afterPay
	requests []seen
	paid     []int           // accepts index of each valid payment received
	nonces   map[string]bool // distinct authorization nonces
	headers  []string        // every PAYMENT-SIGNATURE value received
	sigs     []string        // every signature received, hex without 0x
	ids      []string        // every payment-identifier id received
	issued   map[string]bool // sign-in nonces offered and not yet used
	proofs   []string        // every SIGN-IN-WITH-X value received
	grants   int             // requests let in by a sign-in
}

func newServer(tb testing.TB, accepts ...x402.PaymentRequirements) *server {
	tb.Helper()
	s := &server{
		tb:       tb,
		accepts:  accepts,
		verifier: &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return testNow }},
		upto: &upto.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return testNow },
			Facilitators: []common.Address{common.HexToAddress(facilitator)}},
		nonces: map[string]bool{},
	}
	s.srv = httptest.NewServer(s)
	tb.Cleanup(s.srv.Close)
	return s
}

func (s *server) URL(path string) string { return s.srv.URL + path }

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.tb.Errorf("server: read body: %v", err)
	}
	header := r.Header.Get(x402.HeaderPaymentSignature)
	s.mu.Lock()
	s.requests = append(s.requests, seen{
		Method: r.Method, Path: r.URL.Path, Body: string(body), Payment: header,
		Legacy: r.Header.Get(x402.HeaderLegacyPayment), SignIn: r.Header.Get(x402.HeaderSignInWithX),
	})
	n := len(s.requests) - 1
	s.mu.Unlock()

	if to, ok := s.routes[r.URL.Path]; ok {
		http.Redirect(w, r, to, http.StatusFound)
		return
	}
	if s.free {
		_, _ = io.WriteString(w, "free")
		return
	}
	if proof := r.Header.Get(x402.HeaderSignInWithX); proof != "" && s.siwx != nil && header == "" {
		if s.acceptSignIn(r, proof) {
			if s.signInRedirect != "" {
				http.Redirect(w, r, s.signInRedirect, http.StatusFound)
				return
			}
			_, _ = io.WriteString(w, "signed in")
			return
		}
		s.challenge(w, r, "Payment required")
		return
	}
	if header == "" {
		s.challenge(w, r, "Payment required")
		return
	}
	_, payer, ok := s.check(header, n)
	if !ok {
		s.challenge(w, r, "invalid payment")
		return
	}
	s.mu.Lock()
	after, amount := s.after, s.settleAmount
	if len(s.script) > 0 {
		after, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()
	settled := func(success bool, reason x402.Reason, tx string) {
		sr := x402.SettleResponse{Success: success, ErrorReason: reason, Transaction: tx, Network: network, Payer: payer}
		if success && amount != nil {
			sr.Amount = *amount
		}
		v, err := x402.EncodeHeader(sr)
		if err != nil {
			s.tb.Errorf("server: encode settle response: %v", err)
		}
		w.Header().Set(x402.HeaderPaymentResponse, v)
	}
	const tx = "0xabababababababababababababababababababababababababababababababab"
	switch after {
	case paidOK:
		settled(true, "", tx)
		_, _ = io.WriteString(w, "paid")
	case paidNoSettleHeader:
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "paid")
	case paidGarbageSettle:
		w.Header().Set(x402.HeaderPaymentResponse, "not base64 at all!")
		_, _ = io.WriteString(w, "paid")
	case paid402Again:
		s.challenge(w, r, string(x402.ReasonEVMSignature))
	case paidSettleFailed:
		settled(false, x402.ReasonInsufficientFunds, "")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = io.WriteString(w, "{}")
	case paidSettlePending:
		settled(false, x402.ReasonSettlementPending, tx)
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = io.WriteString(w, "{}")
	case paidHandler500:
		http.Error(w, "upstream failed", http.StatusInternalServerError)
	case paidHangUp:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			s.tb.Errorf("server: hijack: %v", err)
			return
		}
		_ = conn.Close()
	case paidRedirect:
		settled(true, "", tx)
		http.Redirect(w, r, s.redirectTo, http.StatusTemporaryRedirect)
	case paidInUse:
		w.Header().Set("Retry-After", "2")
		http.Error(w, `{"error":{"code":"payment_in_use"}}`, http.StatusConflict)
	case paidConflict:
		http.Error(w, `{"error":{"code":"payment_already_used"}}`, http.StatusConflict)
	case paidUptoStream:
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"hi"}}]}`+"\n\n")
		if amount != nil {
			_, _ = io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"x_llm4agents":{"charged":"`+*amount+`","maximum":"`+s.offers()[0].Amount+`","transaction":"`+tx+`"}}`+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	default:
		s.tb.Errorf("server: unknown afterPay %d", s.after)
	}
}

// challenge answers 402 as the official servers do.
func (s *server) challenge(w http.ResponseWriter, r *http.Request, reason string) {
	value := ""
	if s.required != nil {
		value = *s.required
	} else {
		pr := x402.PaymentRequired{
			X402Version: x402.Version, Error: reason,
			Resource: &x402.ResourceInfo{URL: "http://" + r.Host + r.URL.Path, Description: "test", MimeType: "text/plain"},
			Accepts:  s.offers(), Extensions: s.extensions,
		}
		if s.siwx != nil {
			nonce := fmt.Sprintf("%032x", len(s.snapshotRequests()))
			s.mu.Lock()
			if s.issued == nil {
				s.issued = map[string]bool{}
			}
			s.issued[nonce] = true
			s.mu.Unlock()
			pr.Extensions = maps.Clone(pr.Extensions)
			if pr.Extensions == nil {
				pr.Extensions = map[string]json.RawMessage{}
			}
			pr.Extensions[client.ExtensionSignInWithX] = s.siwx(r, nonce)
		}
		var err error
		if value, err = x402.EncodeHeader(pr); err != nil {
			s.tb.Errorf("server: encode 402: %v", err)
		}
	}
	if value != "" {
		w.Header().Set(x402.HeaderPaymentRequired, value)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusPaymentRequired)
	_, _ = io.WriteString(w, `{"error":{"message":"payment required","type":"payment_required","code":"payment_required"}}`)
}

// check decodes and verifies a PAYMENT-SIGNATURE against the offers, and notes
// its id and nonce on request n. A payment that decodes but does not verify
// fails the test: the Transport must only send valid ones.
func (s *server) check(header string, n int) (int, string, bool) {
	s.mu.Lock()
	s.headers = append(s.headers, header)
	s.mu.Unlock()
	p, err := x402.DecodePaymentPayload(header)
	if err != nil {
		// Not from the Transport (tests set such headers by hand): the official
		// server treats it as no payment.
		return 0, "", false
	}
	accepted, err := p.AcceptedRequirements()
	if err != nil {
		s.tb.Errorf("server: payload without accepted: %v", err)
		return 0, "", false
	}
	for i, o := range s.offers() {
		if x402.Match(o, accepted) != nil {
			continue
		}
		from, nonce, sig, err := s.verify(p, o)
		if err != nil {
			s.tb.Errorf("server: payment for accepts[%d] does not verify: %v", i, err)
			return 0, "", false
		}
		id, err := x402.PaymentIDFromPayload(p, false)
		if declared, _ := x402.PaymentIDDeclared(s.extensions); err != nil && declared {
			s.tb.Errorf("server: payment-identifier: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests[n].ID, s.requests[n].Nonce = id, nonce
		if id != "" {
			s.ids = append(s.ids, id)
		}
		s.sigs = append(s.sigs, fmt.Sprintf("%x", sig))
		if !s.nonces[nonce] {
			s.nonces[nonce] = true
			s.paid = append(s.paid, i)
		}
		return i, from, true
	}
	s.tb.Errorf("server: accepted %s matches no offer", p.Accepted)
	return 0, "", false
}

// verify checks a payment for offer o offline, as exact.Verifier.Check or
// upto.Verifier.Check does, with a signature that must recover to its payer,
// and returns the payer, the nonce and the signature.
func (s *server) verify(p *x402.PaymentPayload, o x402.PaymentRequirements) (from, nonce string, sig []byte, err error) {
	if o.Scheme == upto.Scheme {
		vd, recovered, err := s.upto.Check(p, o)
		if err != nil || !recovered {
			return "", "", nil, fmt.Errorf("upto: recovered=%v: %w", recovered, err)
		}
		a := vd.Payload.Authorization
		return a.From.Hex(), "permit2:" + a.Nonce.String(), vd.Payload.Signature, nil
	}
	vd, recovered, err := s.verifier.Check(p, o)
	if err != nil || !recovered {
		return "", "", nil, fmt.Errorf("exact: recovered=%v: %w", recovered, err)
	}
	a := vd.Payload.Authorization
	return a.From.Hex(), a.Nonce.Hex(), vd.Payload.Signature, nil
}

// offers returns the accepts the server offers now.
func (s *server) offers() []x402.PaymentRequirements {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepts
}

// setAfter changes how valid payments are answered from the next request on,
// and the amount a successful PAYMENT-RESPONSE reports (nil: none).
func (s *server) setAfter(after afterPay, amount *string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after, s.settleAmount = after, amount
}

// setOffers changes the accepts offered from the next request on.
func (s *server) setOffers(accepts ...x402.PaymentRequirements) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepts = accepts
}

func (s *server) snapshot() (requests []seen, paid []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.requests...), append([]int(nil), s.paid...)
}

// secrets returns every payment header and signature the server received: none
// may appear in a log line or an error.
func (s *server) secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Concat(s.headers, s.sigs, s.ids, s.proofs)
}

// paidRequests returns the requests that carried a valid payment.
func (s *server) paidRequests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []seen
	for _, r := range s.requests {
		if r.Nonce != "" {
			out = append(out, r)
		}
	}
	return out
}

// logBuffer collects log output from concurrent goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newTransport returns a Transport paying with dev key 0 under pol, logging at
// debug level into the returned buffer. At cleanup it checks that no secret the
// servers received appears in the log.
func newTransport(tb testing.TB, pol client.Policy, servers ...*server) (*client.Transport, *logBuffer) {
	tb.Helper()
	logs := &logBuffer{}
	base := &http.Transport{}
	tb.Cleanup(base.CloseIdleConnections)
	tr := &client.Transport{
		Base:   base,
		Signer: exact.NewKeySigner(testchain.DevKey(0)),
		Policy: pol,
		Now:    func() time.Time { return testNow },
		Log:    slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Retries as by default, without the waits.
		Retry: client.RetryPolicy{MaxWait: time.Millisecond, Backoff: time.Millisecond},
	}
	tb.Cleanup(func() {
		out := logs.String()
		for _, s := range servers {
			for _, secret := range s.secrets() {
				if strings.Contains(out, secret) {
					tb.Errorf("log contains a payment header or signature: %.40s...", secret)
				}
			}
		}
		if key := fmt.Sprintf("%x", crypto.FromECDSA(testchain.DevKey(0))); strings.Contains(out, key) {
			tb.Error("log contains the private key")
		}
	})
	return tr, logs
}

// checkErrorClean fails if err's text contains a secret the servers received.
func checkErrorClean(tb testing.TB, err error, servers ...*server) {
	tb.Helper()
	if err == nil {
		return
	}
	for _, s := range servers {
		for _, secret := range s.secrets() {
			if strings.Contains(err.Error(), secret) {
				tb.Errorf("error contains a payment header or signature: %v", err)
			}
		}
	}
}
