package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Top-ups (D17). POST
// /v1/credits/topup sells credits for an amount the buyer chooses within
// [TopUpMin, TopUpMax], through the same x402 `exact` payment as a chat
// completion: 402 with PAYMENT-REQUIRED quoting the amount itself, then
// verify, claim, settle. There is no upstream. The deposit is on-chain;
// every hold and charge after it is an off-chain ledger entry.
//
// Once the settlement's receipt shows status 1 with the configured
// confirmations, the payer is credited with ledger.TopUp under the
// settlement's reference (network, transaction, index of the token's
// Transfer log), so one settlement credits once, whoever sees it: a retry, a
// concurrent copy, another replica.
//
// The claim of a top-up carries a marker in its staged response, written
// before the settlement: only a claim with the marker is ever credited, so
// an authorization that paid for a chat completion (the same amount, the
// same payTo) can never be credited as well, and a top-up's authorization
// presented for a chat is refused by the chat's own checks of the staged
// fingerprint.
//
// A settlement answered pending (D3) leaves the claim pending with the
// marker; re-presenting the same PAYMENT-SIGNATURE settles again with the
// same payload (the facilitator resumes its record, D5) and credits once
// mined. A claim found settled (a lost answer, a crash between settlement
// and credit, a receipt not yet final) is credited by the next presentation
// of the same PAYMENT-SIGNATURE, idempotently, and answered 200 with
// X-Llm4agents-Replay: credited. A buyer who never comes back is credited
// all the same by the background sweep (topup_sweep.go), which reads the
// settled and pending top-up claims from the store, checks their
// transactions against the chain with the same finality rule, and credits
// under the same reference: the retry and the sweep credit once between
// them.

// ChainReader is what a top-up reads from the chain: its settlement's
// receipt, and the head to count confirmations; and, for the sweep of a
// pending top-up whose transaction was replaced (topup_sweep.go), the
// token's authorizationState, its AuthorizationUsed logs and the head's
// time. *ethclient.Client and the simulated backend's client satisfy it.
type ChainReader interface {
	ethereum.ContractCaller
	TransactionReceipt(ctx context.Context, tx common.Hash) (*types.Receipt, error)
	BlockNumber(ctx context.Context) (uint64, error)
	FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error)
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

const (
	// topUpPath is the top-up route's path, in resource URLs and markers.
	topUpPath = "/v1/credits/topup"
	// maxTopUpBody bounds a top-up request: {"amount":"<up to 78 digits>"}.
	maxTopUpBody = 1 << 10
	// maxAmountDigits bounds the amount's text before it is parsed: 2^256
	// has 78 digits.
	maxAmountDigits = 78
	// topUpReplay marks the answer of a top-up credited before.
	topUpReplay = "credited"
)

// topUpAnswer is the body of a credited top-up.
type topUpAnswer struct {
	Account     string `json:"account"`
	Credited    string `json:"credited"` // atomic units
	Balance     string `json:"balance"`  // the account's spendable balance right after this credit
	Transaction string `json:"transaction"`
	LedgerSeq   int64  `json:"ledger_seq"`
	// Receipt is the top-up's signed receipt envelope (D18), also in
	// X-Llm4agents-Receipt; absent when the gateway signs no receipts.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// topUp serves POST /v1/credits/topup.
func (s *Server) topUp(w http.ResponseWriter, r *http.Request) error {
	if hasOwnKey(r) && r.Header.Get(x402.HeaderPaymentSignature) != "" {
		// D12: a top-up is paid on chain only; a key next to a payment is a
		// client mistake, refused before anything is charged.
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "key_and_payment",
			Message: "a top-up is paid with a PAYMENT-SIGNATURE only; send no API key with it; nothing was charged"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTopUpBody))
	if err != nil {
		return s.topUpBadRequest(fmt.Sprintf("the request body could not be read (at most %d bytes)", maxTopUpBody))
	}
	text, err := parseTopUp(body)
	if err != nil {
		return s.topUpBadRequest(err.Error())
	}
	amount, err := s.topUpAmount(text)
	if err != nil {
		return s.topUpBadRequest(err.Error())
	}
	q := s.topUpQuote(amount)
	t, err := s.pw.AdmitTopUp(r.Context(), q, presented(r), paywall.Request{Method: http.MethodPost, Path: topUpPath})
	if err != nil {
		return err
	}
	// From here on the payment may be spent: the work outlives the client,
	// bounded by a settlement and a few reads and writes.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.pw.SettleBudget()+2*store.DefaultTimeout)
	defer cancel()
	switch t.State() {
	case store.PaymentHeld: // held by this request: settle below
	case store.PaymentSettled:
		return s.creditTopUp(ctx, w, q, t, t.Transaction(), true)
	case store.PaymentPending:
		tx, err := t.Resolve(ctx)
		if err != nil {
			return err
		}
		return s.creditTopUp(ctx, w, q, t, tx, false)
	}
	sr, out := t.Settle(ctx)
	if out != paywall.Paid {
		return paywall.Unsettled(sr, out)
	}
	return s.creditTopUp(ctx, w, q, t, sr.Transaction, false)
}

// parseTopUp decodes a top-up request strictly: one JSON object whose only
// member is "amount", a string, exactly once.
func parseTopUp(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", errors.New("the body is not a JSON object")
	}
	var amount *string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", errors.New("the body is not valid JSON")
		}
		name, _ := tok.(string) // object keys are strings
		switch {
		case name != "amount":
			return "", fmt.Errorf("unknown field %q", truncate(name, 40))
		case amount != nil:
			return "", errors.New(`"amount" is given twice`)
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return "", errors.New(`"amount" must be a string of decimal digits (atomic units)`)
		}
		amount = &v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", errors.New("the body is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("the body has data after its JSON object")
	}
	if amount == nil {
		return "", errors.New(`"amount" is required`)
	}
	return *amount, nil
}

// topUpAmount parses a top-up amount, decimal digits of atomic units, and
// checks it against the bounds.
func (s *Server) topUpAmount(text string) (*big.Int, error) {
	c := s.cfg.Credits
	a, err := parseAtomic(text)
	if err != nil {
		return nil, err
	}
	if a.Cmp(c.TopUpMin) < 0 || a.Cmp(c.TopUpMax) > 0 || a.Cmp(big.NewInt(store.MaxAmount)) > 0 {
		return nil, fmt.Errorf("amount %s is outside the top-up bounds", a)
	}
	return a, nil
}

// parseAtomic parses an amount of atomic units written as decimal digits,
// without sign or leading zeros, refusing anything else before it is parsed.
func parseAtomic(text string) (*big.Int, error) {
	if text == "" || len(text) > maxAmountDigits || strings.Trim(text, "0123456789") != "" || (len(text) > 1 && text[0] == '0') {
		return nil, fmt.Errorf("amount %q is not a whole number of atomic units in decimal digits", truncate(text, 80))
	}
	a, _ := new(big.Int).SetString(text, 10) // digits only, checked above
	return a, nil
}

// topUpBounds states the bounds in atomic units and in the asset.
func (s *Server) topUpBounds() string {
	c := s.cfg.Credits
	return fmt.Sprintf("%s (%s) and %s (%s) atomic units", c.TopUpMin, s.display(c.TopUpMin), c.TopUpMax, s.display(c.TopUpMax))
}

// topUpBadRequest is the 400 of a malformed top-up, stating the bounds.
func (s *Server) topUpBadRequest(msg string) error {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_top_up",
		Message: msg + `; a top-up is {"amount":"<atomic units>"} between ` + s.topUpBounds() + "; nothing was charged"}
}

// topUpQuote is the offer of a top-up: the amount itself. Its 402 offers no
// payment-identifier: a top-up keeps no recovery record; its retry is the
// same PAYMENT-SIGNATURE.
func (s *Server) topUpQuote(amount *big.Int) *paywall.Quote {
	return &paywall.Quote{
		Amount: amount,
		Offer:  s.pw.Offer(amount),
		Resource: &x402.ResourceInfo{
			URL:         s.cfg.PublicURL + topUpPath,
			Description: "prepaid credits: " + s.display(amount),
			MimeType:    "application/json",
		},
		What: paywall.WhatTopUp,
	}
}

// creditTopUp credits a settled top-up once it is final and answers it. Any
// failure here leaves the claim settled: the next presentation of the same
// payment credits it, once.
func (s *Server) creditTopUp(ctx context.Context, w http.ResponseWriter, q *paywall.Quote, t *paywall.TopUp, tx string, replay bool) error {
	c := s.cfg.Credits
	retry := func(code, msg string, err error) error {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: code,
			Message: msg + "; the payment settled in " + tx + "; present the same PAYMENT-SIGNATURE again to be credited, once",
			Header:  http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"2"}}, Err: err}
	}
	ref, err := s.topUpRef(ctx, tx, t.Authorization())
	switch {
	case errors.Is(err, errNotFinal):
		s.metrics.topUp("not_final")
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "settlement_not_final",
			Message: "the top-up's settlement " + tx + " is not final yet; present the same PAYMENT-SIGNATURE again to be credited, once",
			Header:  http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"5"}}, Err: err}
	case err != nil:
		return retry("chain_unavailable", "the top-up's settlement could not be read from the chain", err)
	}
	e, err := c.Ledger.TopUp(ctx, ref, t.Authorization().From, q.Amount)
	if err != nil {
		return retry("ledger_unavailable", "the top-up could not be credited right now", err)
	}
	owner := strings.ToLower(t.Authorization().From.Hex())
	ans := topUpAnswer{Account: owner, Credited: q.Amount.String(), Transaction: tx, LedgerSeq: e.Seq, Balance: "0"}
	var balance int64
	for _, p := range e.Postings {
		if p.Account == store.UserAccount(owner) {
			balance = p.BalanceAfter
			ans.Balance = fmt.Sprint(balance)
		}
	}
	// One receipt per top-up: a second presentation gets the first one's.
	if ans.Receipt = s.topUpReceipt(ctx, t.Key(), q.Amount, balance, e.Seq); ans.Receipt != nil {
		w.Header().Set(receipt.Header, receiptHeader(ans.Receipt))
	}
	sr := &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: t.Payer()}
	if err := paidHeaders(w.Header(), sr); err != nil {
		return fmt.Errorf("encode settle response: %w", err)
	}
	outcome := "credited"
	if replay {
		outcome = "presented_again"
		w.Header().Set(replayHeader, topUpReplay)
	}
	s.metrics.topUp(outcome)
	writeJSON(w, http.StatusOK, ans)
	return nil
}

// errNotFinal: the settlement's receipt is absent or has fewer
// confirmations than configured.
var errNotFinal = errors.New("settlement not final")

// errNotMined is the errNotFinal of a transaction the node does not know:
// not mined yet, or replaced by another (a fee bump, D19).
var errNotMined = fmt.Errorf("%w: transaction not found", errNotFinal)

// errUnpaid: the settlement named is not a transaction hash, reverted, or
// carries no transfer of the authorization. Unlike errNotFinal, reading the
// chain again will not change that.
var errUnpaid = errors.New("settlement does not pay the authorization")

// topUpRef reads the receipt of tx and returns the settlement reference of
// a's transfer in it, once final (D17: status 1, N confirmations).
func (s *Server) topUpRef(ctx context.Context, tx string, a *exact.Authorization) (string, error) {
	return settlementRef(ctx, s.cfg.Credits, s.cfg.Network, s.asset, tx, a)
}

// settlementRef is topUpRef for any holder of the credits config: the
// request path and the sweep (topup_sweep.go) both credit through it, so
// that they credit one settlement under one reference, once between them.
func settlementRef(ctx context.Context, c *Credits, network string, token common.Address, tx string, a *exact.Authorization) (string, error) {
	if !isTxHash(tx) {
		return "", fmt.Errorf("settlement transaction %q is not a hash: %w", truncate(tx, 80), errUnpaid)
	}
	h := common.HexToHash(tx)
	rc, err := c.Chain.TransactionReceipt(ctx, h)
	switch {
	case errors.Is(err, ethereum.NotFound):
		return "", errNotMined
	case err != nil:
		return "", fmt.Errorf("receipt of %s: %w", tx, err)
	case rc.Status != types.ReceiptStatusSuccessful:
		return "", fmt.Errorf("settlement %s reverted: %w", tx, errUnpaid)
	}
	head, err := c.Chain.BlockNumber(ctx)
	if err != nil {
		return "", fmt.Errorf("chain head: %w", err)
	}
	if rc.BlockNumber == nil || head+1 < rc.BlockNumber.Uint64()+max(c.Confirmations, 1) {
		return "", errNotFinal
	}
	i, ok := transferIndex(rc.Logs, token, a)
	if !ok {
		return "", fmt.Errorf("settlement %s carries no transfer of this authorization: %w", tx, errUnpaid)
	}
	return ledger.SettlementRef(network, h, i), nil
}

// transferIndex finds, among token's own logs, AuthorizationUsed(from,
// nonce) immediately followed by Transfer(from, to, value) of a (D5), and
// returns the Transfer's log index: what the credit is keyed by.
func transferIndex(logs []*types.Log, token common.Address, a *exact.Authorization) (uint, bool) {
	var own []*types.Log
	for _, l := range logs {
		if l.Address == token && !l.Removed {
			own = append(own, l)
		}
	}
	word := func(addr common.Address) common.Hash { return common.BytesToHash(addr[:]) }
	for i := 0; i+1 < len(own); i++ {
		used, tr := own[i], own[i+1]
		if len(used.Topics) == 3 && used.Topics[0] == exact.TopicAuthorizationUsed &&
			used.Topics[1] == word(a.From) && used.Topics[2] == a.Nonce &&
			len(tr.Topics) == 3 && tr.Topics[0] == exact.TopicTransfer &&
			tr.Topics[1] == word(a.From) && tr.Topics[2] == word(a.To) &&
			len(tr.Data) == 32 && new(big.Int).SetBytes(tr.Data).Cmp(a.Value) == 0 {
			return tr.Index, true
		}
	}
	return 0, false
}

func isTxHash(s string) bool {
	b, ok := strings.CutPrefix(s, "0x")
	return ok && len(b) == 64 && strings.Trim(strings.ToLower(b), "0123456789abcdef") == ""
}

// balanceAnswer is the body of GET /v1/credits/balance. Amounts are decimal
// strings of atomic units.
type balanceAnswer struct {
	Account string     `json:"account"`
	Asset   string     `json:"asset"`
	Network string     `json:"network"`
	Balance string     `json:"balance"` // spendable
	Held    string     `json:"held"`    // reserved for calls in flight
	Key     *keyAnswer `json:"key,omitempty"`
}

// keyAnswer is what the key a balance was asked with has spent and may
// still spend; a cap that does not bind is null, as is what remains under it.
type keyAnswer struct {
	ID              string  `json:"id"`
	Spent           string  `json:"spent"`
	Held            string  `json:"held"`
	TotalCap        *string `json:"total_cap"`
	Remaining       *string `json:"remaining"`
	PeriodCap       *string `json:"period_cap"`
	PeriodSpent     string  `json:"period_spent"`
	PeriodRemaining *string `json:"period_remaining"`
}

// balance serves GET /v1/credits/balance, for an API key (its owner's
// balance and the key's own usage) or a sign-in session.
func (s *Server) balance(w http.ResponseWriter, r *http.Request) error {
	if err := refusePaymentOnFreeRoute(r); err != nil {
		return err
	}
	c := s.cfg.Credits
	ctx, cancel := context.WithTimeout(r.Context(), 2*store.DefaultTimeout)
	defer cancel()
	bearer, err := bearerToken(r)
	if err != nil {
		return err
	}
	var owner string
	var key *store.APIKey
	if credits.IsKey(bearer) {
		k, err := c.Keys.Authenticate(ctx, bearer)
		if err != nil {
			return credentialError(err, "the API key")
		}
		owner, key = k.Owner, &k
	} else {
		sess, err := c.Auth.Session(ctx, bearer)
		if err != nil {
			return credentialError(err, "the session token")
		}
		owner = sess.Owner
	}
	if !common.IsHexAddress(owner) {
		return fmt.Errorf("account %q is not an address", owner)
	}
	var b ledger.Balance
	if c.Leases != nil {
		b, err = c.Leases.Balance(ctx, common.HexToAddress(owner))
	} else {
		b, err = c.Ledger.Balance(ctx, common.HexToAddress(owner))
	}
	if err != nil {
		return ledgerUnavailable(err)
	}
	ans := balanceAnswer{Account: owner, Asset: s.cfg.Asset, Network: s.cfg.Network, Balance: b.Available.String(), Held: b.Held.String()}
	if key != nil {
		if ans.Key, err = s.keyUsage(ctx, *key); err != nil {
			return ledgerUnavailable(err)
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, ans)
	return nil
}

func ledgerUnavailable(err error) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "ledger_unavailable",
		Message: "the balance could not be read right now", Header: http.Header{"Retry-After": {"2"}}, Err: err}
}

// keyUsage reports what k spent and may still spend.
func (s *Server) keyUsage(ctx context.Context, k store.APIKey) (*keyAnswer, error) {
	lk := *ledger.KeyOf(k)
	var u store.KeyUsage
	var err error
	if ls := s.cfg.Credits.Leases; ls != nil && common.IsHexAddress(k.Owner) {
		u, err = ls.KeyUsage(ctx, common.HexToAddress(k.Owner), lk)
	} else {
		u, err = s.cfg.Credits.Ledger.KeyUsage(ctx, lk)
	}
	if err != nil {
		return nil, err
	}
	left := func(limit, spent, held int64) (*string, *string) {
		if limit == store.NoCap {
			return nil, nil
		}
		l, r := fmt.Sprint(limit), fmt.Sprint(max(limit-spent-held, 0))
		return &l, &r
	}
	ka := &keyAnswer{ID: k.ID, Spent: fmt.Sprint(u.Spent), Held: fmt.Sprint(u.Held), PeriodSpent: fmt.Sprint(u.PeriodSpent)}
	ka.TotalCap, ka.Remaining = left(k.TotalCap, u.Spent, u.Held)
	ka.PeriodCap, ka.PeriodRemaining = left(k.PeriodCap, u.PeriodSpent, u.PeriodHeld)
	return ka, nil
}

// bearerToken returns the one bearer credential of r.
func bearerToken(r *http.Request) (string, error) {
	vs := r.Header.Values("Authorization")
	if len(vs) == 1 {
		if t, ok := strings.CutPrefix(vs[0], "Bearer "); ok && strings.TrimSpace(t) != "" {
			return strings.TrimSpace(t), nil
		}
	}
	return "", &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "credentials_required",
		Message: "send Authorization: Bearer <sk-l4a- API key or session token>", Header: http.Header{"WWW-Authenticate": {"Bearer"}}}
}

// credentialError maps a refused key or session to 401, a store failure to
// 503. The credential is never in the message.
func credentialError(err error, what string) error {
	switch {
	case errors.Is(err, credits.ErrUnknownKey), errors.Is(err, credits.ErrNoSession):
		return &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_credentials",
			Message: what + " is unknown or expired", Header: http.Header{"WWW-Authenticate": {"Bearer"}}}
	case errors.Is(err, credits.ErrRevokedKey), errors.Is(err, credits.ErrExpiredKey):
		return &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_credentials",
			Message: what + " is revoked or expired", Header: http.Header{"WWW-Authenticate": {"Bearer"}}}
	default:
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable",
			Message: what + " could not be checked right now", Header: http.Header{"Retry-After": {"2"}}, Err: err}
	}
}
