package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	dto "github.com/prometheus/client_model/go"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// The operator's view reads only what the gateway already keeps: the
// settlement records of its facilitator, its metrics registry and its
// receipt log. It holds no numbers of its own.

// settlementsRead bounds the settlement records one operator page reads.
const settlementsRead = store.MaxRecentPage

// settlementTx returns the transaction that settled an x402 payment, or ""
// when it is not known here (a remote facilitator, or not settled yet).
func (h *Handler) settlementTx(ctx context.Context, network string, payer common.Address, nonce common.Hash) string {
	if h.cfg.Settlements == nil || network == "" {
		return ""
	}
	s, err := h.cfg.Settlements.Settlement(ctx, exact.Key(network, h.cfg.Asset, payer, nonce))
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.log.WarnContext(ctx, "read settlement", "err", err)
		}
		return ""
	}
	if s.State != store.StateSettled {
		return ""
	}
	return s.TxHash
}

func (h *Handler) txURL(hash string) string {
	if hash == "" || h.cfg.TxURL == "" {
		return ""
	}
	return strings.ReplaceAll(h.cfg.TxURL, "%s", hash)
}

type outcomeRow struct {
	Outcome string
	Count   int64
	Kind    string // "paid", "refused" or "failed": how the page colours it
}

type settlementRow struct {
	When    time.Time
	Payer   string
	Amount  string
	State   string
	Reorg   string
	TxHash  string
	TxURL   string
	Problem string
}

type payerRow struct {
	Payer    string
	Payments int
	Amount   string
	amount   *big.Int
}

type railRow struct {
	Rail, Amount string
	Calls        int
}

type modelUsage struct {
	Model        string
	Calls        int
	Input        string
	Output       string
	Amount       string
	amount       *big.Int
	input, outpt *big.Int
}

type modelRow struct {
	Model string
	Calls int64
}

type operatorBody struct {
	Symbol string
	// Settlements of the last day (in-process facilitator only).
	HasSettlements bool
	Revenue24h     string
	Settled        int
	Revenue        chart
	Pending        []settlementRow
	Recent         []settlementRow
	TopPayers      []payerRow
	// From every account's receipts of the last day.
	HasCharges  bool
	Charges     chart
	ChargesNote string
	RailTotals  []railRow
	ModelUsage  []modelUsage
	// From the metrics.
	HasMetrics  bool
	Payments    []outcomeRow
	CreditCalls []outcomeRow
	TopUps      []outcomeRow
	Reconciler  []outcomeRow // what the reconciler resolved, and what reorgs did
	Anchors     []outcomeRow
	Models      []modelRow
	// Signers are the facilitator signers' gas, one per network settled on.
	Signers []signerRow
	// The receipt log.
	HasLog        bool
	LogSize       string
	LogAnchor     string
	LogAnchorTx   string
	LogAnchorURL  string
	LogAnchorWhen time.Time
	LogProblem    string
}

// operator builds the operator's page: admins only; anyone else gets the
// answer of a page that does not exist.
func (h *Handler) operator(ctx context.Context, a account) (string, view, error) {
	if !a.Admin {
		return "", view{}, errNotFound
	}
	b := operatorBody{Symbol: h.cfg.AssetSymbol}
	if err := h.settlements(ctx, &b); err != nil {
		return "", view{}, err
	}
	if h.cfg.AllReceipts != nil {
		if err := h.charges(ctx, &b); err != nil {
			return "", view{}, err
		}
	}
	if h.cfg.Metrics != nil {
		if err := h.metrics(&b); err != nil {
			return "", view{}, err
		}
	}
	if h.cfg.ReceiptLog != nil {
		h.logState(ctx, &b)
	}
	return "operator", view{Title: "Operator", Body: b}, nil
}

func (h *Handler) settlements(ctx context.Context, b *operatorBody) error {
	if h.cfg.Settlements == nil {
		return nil
	}
	b.HasSettlements = true
	now := h.cfg.Now().UTC()
	recent, err := h.cfg.Settlements.RecentSettlements(ctx, store.AllNetworks, now.Add(-24*time.Hour), settlementsRead)
	if err != nil {
		return fmt.Errorf("read recent settlements: %w", err)
	}
	pending, err := h.cfg.Settlements.UnresolvedSettlements(ctx, store.AllNetworks, 50)
	if err != nil {
		return fmt.Errorf("read pending settlements: %w", err)
	}
	hours := series{}
	total := new(big.Int)
	payers := map[string]*payerRow{}
	slices.SortFunc(recent, func(x, y store.Settlement) int { return y.UpdatedAt.Compare(x.UpdatedAt) })
	for _, s := range recent {
		amt, ok := new(big.Int).SetString(s.Amount, 10)
		if !ok {
			continue
		}
		if s.State == store.StateSettled && s.Reorg != store.ReorgLost {
			b.Settled++
			total.Add(total, amt)
			hours.add("on chain", 23-int(now.Sub(s.UpdatedAt)/time.Hour), 24, amt)
			p := payers[s.Payer]
			if p == nil {
				p = &payerRow{Payer: s.Payer, amount: new(big.Int)}
				payers[s.Payer] = p
			}
			p.Payments++
			p.amount.Add(p.amount, amt)
		}
		if len(b.Recent) < 20 {
			b.Recent = append(b.Recent, h.settlementRow(s, amt))
		}
	}
	for _, s := range pending {
		amt, _ := new(big.Int).SetString(s.Amount, 10)
		b.Pending = append(b.Pending, h.settlementRow(s, amt))
	}
	b.Revenue24h = h.amount(total)
	for _, p := range payers {
		p.Amount = h.amount(p.amount)
		b.TopPayers = append(b.TopPayers, *p)
	}
	slices.SortFunc(b.TopPayers, func(x, y payerRow) int { return y.amount.Cmp(x.amount) })
	b.TopPayers = b.TopPayers[:min(len(b.TopPayers), 10)]
	b.Revenue = stack("revenue-chart", "revenue per hour, last 24 hours", hours, hourLabels(now), 560, 140, h.amount)
	return nil
}

func (h *Handler) settlementRow(s store.Settlement, amt *big.Int) settlementRow {
	return settlementRow{When: s.UpdatedAt, Payer: s.Payer, Amount: h.amount(amt), State: string(s.State), Reorg: string(s.Reorg),
		TxHash: s.TxHash, TxURL: h.txURL(s.TxHash), Problem: s.Reason}
}

// railTopUps is the series of top-ups among the charges: money in for
// credits, which credit calls then draw on.
const railTopUps = "top-ups"

// charges splits what every account was charged in the last day by rail
// (exact, upto, credits; top-ups apart) per hour, and sums calls and tokens
// per model, from the receipts the gateway signed. At most
// store.MaxReceiptsPage receipts are read: past that, the page says so.
func (h *Handler) charges(ctx context.Context, b *operatorBody) error {
	now := h.cfg.Now().UTC()
	recs, err := h.cfg.AllReceipts.RecentReceipts(ctx, now.Add(-24*time.Hour), store.MaxReceiptsPage)
	if err != nil {
		return fmt.Errorf("read recent receipts: %w", err)
	}
	b.HasCharges = true
	if len(recs) == store.MaxReceiptsPage {
		b.ChargesNote = fmt.Sprintf("the latest %d receipts of the last 24 hours", store.MaxReceiptsPage)
	}
	hours := series{}
	rails := map[string]*railRow{}
	railAmt := map[string]*big.Int{}
	models := map[string]*modelUsage{}
	for _, rec := range recs {
		r, _, err := receipt.ParseEnvelope(rec.Envelope)
		if err != nil {
			h.log.ErrorContext(ctx, "stored receipt does not parse", "request_id", rec.RequestID, "err", err)
			continue
		}
		rail := r.Rail
		if r.Model == receipt.ModelTopUp {
			rail = railTopUps
		}
		hours.add(rail, 23-int(now.Sub(rec.CreatedAt)/time.Hour), 24, r.Amount)
		if rails[rail] == nil {
			rails[rail], railAmt[rail] = &railRow{Rail: rail}, new(big.Int)
		}
		rails[rail].Calls++
		railAmt[rail].Add(railAmt[rail], r.Amount)
		if rail == railTopUps {
			continue
		}
		m := models[r.Model]
		if m == nil {
			m = &modelUsage{Model: r.Model, amount: new(big.Int), input: new(big.Int), outpt: new(big.Int)}
			models[r.Model] = m
		}
		m.Calls++
		m.amount.Add(m.amount, r.Amount)
		m.input.Add(m.input, r.InputTokens)
		m.outpt.Add(m.outpt, r.OutputTokens)
	}
	for rail, row := range rails {
		row.Amount = h.amount(railAmt[rail])
		b.RailTotals = append(b.RailTotals, *row)
	}
	slices.SortFunc(b.RailTotals, func(x, y railRow) int { return railAmt[y.Rail].Cmp(railAmt[x.Rail]) })
	for _, m := range models {
		m.Amount, m.Input, m.Output = h.amount(m.amount), m.input.String(), m.outpt.String()
		b.ModelUsage = append(b.ModelUsage, *m)
	}
	slices.SortFunc(b.ModelUsage, func(x, y modelUsage) int { return y.amount.Cmp(x.amount) })
	b.Charges = stack("charges-chart", "charged per hour by rail, last 24 hours", hours, hourLabels(now), 560, 140, h.amount)
	return nil
}

// hourLabels labels the last 24 hours, oldest first.
func hourLabels(now time.Time) []string {
	out := make([]string, 24)
	for i := range out {
		out[i] = now.Add(time.Duration(i-23) * time.Hour).Format("15:00")
	}
	return out
}

// outcome kinds: how the operator should read an outcome of the payment
// counters.
var paidOutcomes = map[string]bool{"settled": true, "recovered": true, "replayed_promoted": true, "charged": true, "credited": true, "presented_again": true}
var failedOutcomes = map[string]bool{"failed_rounds": true, "reorg: lost": true, "reorg: dropped": true, "failed": true, "unresolved": true, "store_down": true, "delivered_unpaid": true, "error": true,
	"unbilled": true, "loss": true, "charged_no_receipt": true, "pending": true}

func kind(outcome string) string {
	switch {
	case paidOutcomes[outcome]:
		return "paid"
	case failedOutcomes[outcome]:
		return "failed"
	}
	return "refused"
}

func (h *Handler) metrics(b *operatorBody) error {
	fams, err := h.cfg.Metrics.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	b.HasMetrics = true
	for _, f := range fams {
		switch f.GetName() {
		case "llm4agents_payments_total":
			b.Payments = outcomes(f)
		case "llm4agents_credit_calls_total":
			b.CreditCalls = outcomes(f)
		case "llm4agents_topups_total":
			b.TopUps = outcomes(f)
		case "llm4agents_facilitator_reconciled_total", "llm4agents_facilitator_reorgs_total":
			prefix := ""
			if f.GetName() == "llm4agents_facilitator_reorgs_total" {
				prefix = "reorg: "
			}
			for _, o := range outcomes(f) {
				o.Outcome = prefix + o.Outcome
				b.Reconciler = append(b.Reconciler, o)
			}
		case "llm4agents_log_anchors_total":
			b.Anchors = outcomes(f)
		case "llm4agents_upstream_duration_seconds":
			for _, m := range f.GetMetric() {
				b.Models = append(b.Models, modelRow{Model: label(m, "model"), Calls: int64(m.GetHistogram().GetSampleCount())}) // #nosec G115 -- a count
			}
			slices.SortFunc(b.Models, func(x, y modelRow) int { return int(y.Calls - x.Calls) })
		case "llm4agents_signer_balance_gwei":
			for _, m := range f.GetMetric() {
				r := signerRow{Network: label(m, "network"), Signer: label(m, "signer")}
				if gwei := int64(m.GetGauge().GetValue()); gwei < 0 {
					r.Gas, r.Low = "unknown (the node did not answer)", true
				} else {
					r.Gas, r.Low = gweiAsETH(gwei), gwei < h.cfg.SignerLowGwei
				}
				b.Signers = append(b.Signers, r)
			}
		}
	}
	return nil
}

// signerRow is one facilitator signer's gas on one network: each is shown,
// so that one chain's empty signer is not hidden behind another's.
type signerRow struct {
	Network, Signer, Gas string
	Low                  bool
}

// gweiAsETH writes a gwei amount as ETH with nine decimals, trailing zeros
// dropped.
func gweiAsETH(gwei int64) string {
	s := fmt.Sprintf("%d.%09d", gwei/1_000_000_000, gwei%1_000_000_000)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " ETH"
}

func outcomes(f *dto.MetricFamily) []outcomeRow {
	var out []outcomeRow
	for _, m := range f.GetMetric() {
		o := label(m, "outcome")
		row := outcomeRow{Outcome: o, Count: int64(m.GetCounter().GetValue())}
		if row.Count > 0 {
			row.Kind = kind(o) // a zero is not news, good or bad
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(x, y outcomeRow) int { return int(y.Count - x.Count) })
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (h *Handler) logState(ctx context.Context, b *operatorBody) {
	b.HasLog = true
	cp, err := h.cfg.ReceiptLog.Checkpoint(ctx)
	if err != nil {
		h.log.WarnContext(ctx, "read log checkpoint", "err", err)
		b.LogProblem = "the log's checkpoint could not be read"
		return
	}
	// A checkpoint note starts origin, size, root hash, one per line.
	if lines := strings.SplitN(string(cp), "\n", 3); len(lines) == 3 {
		if n, err := strconv.ParseInt(lines[1], 10, 64); err == nil {
			b.LogSize = strconv.FormatInt(n, 10)
		}
	}
	as, err := h.cfg.ReceiptLog.Anchors(ctx, 1)
	if err != nil || len(as) == 0 {
		return // the log is not anchored, or not yet
	}
	a := as[0]
	b.LogAnchor, b.LogAnchorTx, b.LogAnchorWhen = strconv.FormatInt(a.Size, 10), a.Transaction.Hex(), a.SentAt
	b.LogAnchorURL = h.txURL(b.LogAnchorTx)
}
