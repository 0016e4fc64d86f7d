package dashboard

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// receiptsShown is how many of an account's latest receipts its page reads:
// the table, the top-ups and the spend chart are drawn from them.
const receiptsShown = 200

// chartDays is how many days the spend chart covers.
const chartDays = 14

// Verification is what the gateway checked of one receipt.
type Verification struct {
	// Signed: the signature recovers the gateway's receipt signer.
	Signed bool
	// Logged: the receipt's leaf is in the receipt log, proven against a
	// signed checkpoint of size LogSize at LogIndex. Pending: queued, not
	// included yet.
	Logged, Pending   bool
	LogIndex, LogSize int64
	// Problem says what failed, for the page; empty when nothing did.
	Problem string
}

// Status is the verification in a few words.
func (v Verification) Status() string {
	switch {
	case v.Problem != "":
		return v.Problem
	case v.Signed && v.Logged:
		return fmt.Sprintf("signed · in log #%d of %d", v.LogIndex, v.LogSize)
	case v.Signed && v.Pending:
		return "signed · log pending"
	case v.Signed:
		return "signed"
	}
	return "unchecked"
}

// receiptRow is one receipt as the page shows it.
type receiptRow struct {
	RequestID string
	When      time.Time
	Model     string
	Rail      string
	KeyID     string
	In, Out   *big.Int // tokens
	Amount    string
	OnChain   bool   // paid by an x402 settlement (exact, upto, a top-up)
	TxHash    string // the settlement's transaction, when known
	TxURL     string
	Verified  Verification
	amount    *big.Int
}

type keyRow struct {
	ID, Name                        string
	TotalCap, PeriodCap, PeriodDays string
	Expires                         string
	Models                          string
	Rate                            string
	Created                         time.Time
	Revoked                         bool
	Spent                           string // from the ledger; else among the receipts shown
}

type spendRow struct {
	Name   string
	Calls  int
	Tokens string
	Amount string
}

type buyerBody struct {
	Credits     bool // the gateway sells credits: balance, top-ups, keys
	Available   string
	Held        string
	Symbol      string
	Network     string
	Keys        []keyRow
	KeyLimit    int
	Receipts    []receiptRow
	TopUps      []receiptRow
	ByKey       []spendRow
	ByModel     []spendRow
	ModelChart  chart
	KeyChart    chart
	TotalSpent  string
	NewKey      string // a key just created: shown once
	NewKeyID    string
	HasReceipts bool
}

// buyer builds the account's page.
func (h *Handler) buyer(ctx context.Context, a account) (string, view, error) {
	b := buyerBody{Symbol: h.cfg.AssetSymbol, Network: h.cfg.Network, Credits: h.cfg.Balances != nil, KeyLimit: store.MaxKeysPerOwner}
	if h.cfg.Balances != nil {
		bal, err := h.cfg.Balances.Balance(ctx, a.Address)
		if err != nil {
			return "", view{}, fmt.Errorf("read balance: %w", err)
		}
		b.Available, b.Held = h.amount(bal.Available), h.amount(bal.Held)
	}
	if h.cfg.Receipts != nil {
		b.HasReceipts = true
		recs, err := h.cfg.Receipts.ReceiptsOf(ctx, store.ReceiptsQuery{Owner: a.Owner, Limit: receiptsShown})
		if err != nil {
			return "", view{}, fmt.Errorf("read receipts: %w", err)
		}
		for i, rec := range recs {
			row, ok := h.receiptRow(ctx, rec, i < provedPerPage)
			if !ok {
				continue
			}
			if row.Model == receipt.ModelTopUp {
				b.TopUps = append(b.TopUps, row)
				continue
			}
			b.Receipts = append(b.Receipts, row)
		}
		h.spend(&b)
	}
	if h.cfg.Keys != nil {
		keys, err := h.cfg.Keys.Keys(ctx, a.Owner)
		if err != nil {
			return "", view{}, fmt.Errorf("read keys: %w", err)
		}
		spent := map[string]*big.Int{}
		for _, r := range b.Receipts {
			if r.KeyID != "" {
				spent[r.KeyID] = add(spent[r.KeyID], r.amount)
			}
		}
		for _, k := range keys {
			row := h.keyRow(k, spent[k.ID])
			if h.cfg.KeyUsage != nil && !k.Revoked() {
				u, err := h.cfg.KeyUsage(ctx, k)
				if err != nil {
					return "", view{}, fmt.Errorf("read key usage: %w", err)
				}
				row.Spent = h.amount(big.NewInt(u.Spent))
				if k.PeriodCap != store.NoCap {
					row.Spent += ", " + h.amount(big.NewInt(u.PeriodSpent)) + " this period"
				}
				if u.Held > 0 {
					row.Spent += " (" + h.amount(big.NewInt(u.Held)) + " held)"
				}
			}
			b.Keys = append(b.Keys, row)
		}
		// Live keys first, newest first within each group.
		slices.SortStableFunc(b.Keys, func(x, y keyRow) int {
			if x.Revoked != y.Revoked {
				if x.Revoked {
					return 1
				}
				return -1
			}
			return y.Created.Compare(x.Created)
		})
	}
	return "buyer", view{Title: "Your account", Body: b}, nil
}

func add(a, b *big.Int) *big.Int {
	if a == nil {
		a = new(big.Int)
	}
	if b != nil {
		a.Add(a, b)
	}
	return a
}

func (h *Handler) amount(v *big.Int) string {
	return pricing.FormatAmount(v, h.cfg.Decimals) + " " + h.cfg.AssetSymbol
}

// receiptRow reads one stored receipt. A receipt that does not parse is
// skipped (and logged): the page shows what it can. prove asks for its
// place in the receipt log to be proven too.
func (h *Handler) receiptRow(ctx context.Context, rec store.StoredReceipt, prove bool) (receiptRow, bool) {
	r, sig, err := receipt.ParseEnvelope(rec.Envelope)
	if err != nil {
		h.log.ErrorContext(ctx, "stored receipt does not parse", "request_id", rec.RequestID, "err", err)
		return receiptRow{}, false
	}
	row := receiptRow{
		RequestID: rec.RequestID, When: time.Unix(int64(min(r.IssuedAt, 1<<62)), 0), Model: r.Model, Rail: r.Rail, // #nosec G115 -- clamped
		KeyID: rec.KeyID, In: r.InputTokens, Out: r.OutputTokens,
		Amount: h.amount(r.Amount), amount: r.Amount, OnChain: r.Rail != receipt.RailCredits,
	}
	if row.OnChain {
		row.TxHash = h.settlementTx(ctx, r.Network, r.Account, r.Payment)
		row.TxURL = h.txURL(row.TxHash)
	}
	if h.cfg.Verify != nil {
		row.Verified = h.cfg.Verify(ctx, rec.RequestID, r, sig, prove)
	}
	return row, true
}

// spend fills the charts and the per-key and per-model totals from the
// receipts shown.
func (h *Handler) spend(b *buyerBody) {
	byKey, byModel := map[string]*spendRow{}, map[string]*spendRow{}
	keyAmt, modelAmt := map[string]*big.Int{}, map[string]*big.Int{}
	keyTok, modelTok := map[string]*big.Int{}, map[string]*big.Int{}
	total := new(big.Int)
	now := h.cfg.Now().UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	labels := make([]string, chartDays)
	for i := range labels {
		labels[i] = today.AddDate(0, 0, i-chartDays+1).Format("Jan 2")
	}
	modelDays, keyDays := series{}, series{}
	for _, r := range b.Receipts {
		key := keyLabel(r)
		for _, g := range []struct {
			m    map[string]*spendRow
			amt  map[string]*big.Int
			tok  map[string]*big.Int
			name string
		}{{byKey, keyAmt, keyTok, key}, {byModel, modelAmt, modelTok, r.Model}} {
			s := g.m[g.name]
			if s == nil {
				s = &spendRow{Name: g.name}
				g.m[g.name] = s
			}
			s.Calls++
			g.amt[g.name] = add(g.amt[g.name], r.amount)
			g.tok[g.name] = add(add(g.tok[g.name], r.In), r.Out)
		}
		total.Add(total, r.amount)
		day := time.Date(r.When.Year(), r.When.Month(), r.When.Day(), 0, 0, 0, 0, time.UTC)
		i := chartDays - 1 - int(today.Sub(day)/(24*time.Hour))
		modelDays.add(r.Model, i, chartDays, r.amount)
		keyDays.add(key, i, chartDays, r.amount)
	}
	b.TotalSpent = h.amount(total)
	rows := func(m map[string]*spendRow, amt, tok map[string]*big.Int) []spendRow {
		out := make([]spendRow, 0, len(m))
		for name, s := range m {
			s.Amount, s.Tokens = h.amount(amt[name]), tok[name].String()
			out = append(out, *s)
		}
		slices.SortFunc(out, func(x, y spendRow) int { return amt[y.Name].Cmp(amt[x.Name]) })
		return out
	}
	b.ByKey, b.ByModel = rows(byKey, keyAmt, keyTok), rows(byModel, modelAmt, modelTok)
	b.ModelChart = stack("spend-chart", "spend per day by model, last 14 days", modelDays, labels, 560, 140, h.amount)
	b.KeyChart = stack("key-chart", "spend per day by key, last 14 days", keyDays, labels, 560, 140, h.amount)
}

// keyLabel names the key a call was paid through, or how it was paid
// without one.
func keyLabel(r receiptRow) string {
	if r.KeyID == "" {
		return "(no key: " + r.Rail + ")"
	}
	return r.KeyID
}

func (h *Handler) keyRow(k store.APIKey, spent *big.Int) keyRow {
	row := keyRow{ID: k.ID, Name: k.Name, Created: k.CreatedAt, Revoked: k.Revoked(), TotalCap: "none", PeriodCap: "none",
		Expires: "never", Models: "all", Rate: "none", Spent: h.amount(spent)}
	if k.TotalCap != store.NoCap {
		row.TotalCap = h.amount(big.NewInt(k.TotalCap))
	}
	if k.PeriodCap != store.NoCap {
		row.PeriodCap = h.amount(big.NewInt(k.PeriodCap)) + " per " + period(k.Period)
	}
	if !k.ExpiresAt.IsZero() {
		row.Expires = k.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if len(k.Models) > 0 {
		row.Models = strings.Join(k.Models, ", ")
	}
	if k.RatePerMinute > 0 {
		row.Rate = strconv.Itoa(k.RatePerMinute) + " calls/min"
	}
	return row
}

func period(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		n := int64(d / (24 * time.Hour))
		if n == 1 {
			return "day"
		}
		return strconv.FormatInt(n, 10) + " days"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + " h"
	}
	return d.String()
}

// createKey creates a key from the form and shows its secret, once.
func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, a account) error {
	if h.cfg.Keys == nil {
		return errNotFound
	}
	req, err := h.keyRequest(r)
	if err != nil {
		return err
	}
	secret, k, err := h.cfg.Keys.CreateKey(r.Context(), a.Owner, req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	_, v, err := h.buyer(ctx, a)
	if err != nil {
		return err
	}
	body := v.Body.(buyerBody)
	body.NewKey, body.NewKeyID = secret, k.ID
	v.Body, v.Account = body, &a
	v.Notice = "Key created. Copy it now: it is shown this once and never again."
	h.render(w, r, http.StatusCreated, "buyer", v)
	return nil
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, a account) error {
	if h.cfg.Keys == nil {
		return errNotFound
	}
	if _, err := h.cfg.Keys.RevokeKey(r.Context(), a.Owner, r.PathValue("id")); err != nil {
		return err
	}
	http.Redirect(w, r, Path+"#keys", http.StatusSeeOther)
	return nil
}

func (h *Handler) changeKey(w http.ResponseWriter, r *http.Request, a account) error {
	if h.cfg.Keys == nil {
		return errNotFound
	}
	c, err := h.keyChange(r)
	if err != nil {
		return err
	}
	if _, err := h.cfg.Keys.ChangeKey(r.Context(), a.Owner, r.PathValue("id"), c); err != nil {
		return err
	}
	http.Redirect(w, r, Path+"#keys", http.StatusSeeOther)
	return nil
}

func badForm(msg string) error {
	return &credits.RequestError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_form", Message: msg}
}

// atomic reads a form's amount in whole units of the asset ("5", "0.25"),
// as a decimal string of atomic units; "" for an empty field.
func (h *Handler) atomic(field, v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	// The form asks for whole units of the asset: "5" is five USDC (the
	// CLI's bare numbers are atomic units; a form's label says USDC).
	whole := v
	if !strings.Contains(whole, ".") {
		whole += ".0"
	}
	amt, err := pricing.ParseAmount(whole, h.cfg.Decimals)
	if err != nil || amt.Sign() < 0 || !amt.IsInt64() {
		return "", badForm(fmt.Sprintf("%s must be an amount of %s such as 5 or 0.25, with at most %d decimals", field, h.cfg.AssetSymbol, h.cfg.Decimals))
	}
	return amt.String(), nil
}

// keyRequest reads the new-key form.
func (h *Handler) keyRequest(r *http.Request) (credits.KeyRequest, error) {
	f := r.PostForm
	req := credits.KeyRequest{Name: strings.TrimSpace(f.Get("name"))}
	total, err := h.atomic("Total cap", f.Get("total_cap"))
	if err != nil {
		return req, err
	}
	if total != "" {
		req.TotalCap = &total
	}
	daily, err := h.atomic("Daily cap", f.Get("daily_cap"))
	if err != nil {
		return req, err
	}
	if daily != "" {
		day := int64(24 * time.Hour / time.Second)
		req.PeriodCap, req.PeriodSeconds = &daily, &day
	}
	if days := strings.TrimSpace(f.Get("expires_days")); days != "" {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			return req, badForm("Expires in must be a whole number of days from 1 to 3650")
		}
		exp := h.cfg.Now().Add(time.Duration(n) * 24 * time.Hour).UTC().Format(time.RFC3339)
		req.ExpiresAt = &exp
	}
	if models := strings.TrimSpace(f.Get("models")); models != "" {
		req.Models = strings.FieldsFunc(models, func(c rune) bool { return c == ',' || c == ' ' })
	}
	if rate := strings.TrimSpace(f.Get("rate")); rate != "" {
		n, err := strconv.Atoi(rate)
		if err != nil || n < 0 {
			return req, badForm("Calls per minute must be a whole number")
		}
		req.RatePerMinute = n
	}
	return req, nil
}

// keyChange reads the limits form of a key: an empty field removes that
// limit, as the form says.
func (h *Handler) keyChange(r *http.Request) (credits.KeyChange, error) {
	f := r.PostForm
	var c credits.KeyChange
	total, err := h.atomic("Total cap", f.Get("total_cap"))
	if err != nil {
		return c, err
	}
	c.TotalCap = credits.Optional[string]{Set: true, Null: total == "", V: total}
	daily, err := h.atomic("Daily cap", f.Get("daily_cap"))
	if err != nil {
		return c, err
	}
	c.PeriodCap = credits.Optional[string]{Set: true, Null: daily == "", V: daily}
	c.PeriodSeconds = credits.Optional[int64]{Set: true, Null: daily == "", V: int64(24 * time.Hour / time.Second)}
	rate := strings.TrimSpace(f.Get("rate"))
	n := 0
	if rate != "" {
		if n, err = strconv.Atoi(rate); err != nil || n < 0 {
			return c, badForm("Calls per minute must be a whole number")
		}
	}
	c.RatePerMinute = credits.Optional[int]{Set: true, V: n}
	return c, nil
}
