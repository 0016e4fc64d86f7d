package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Metrics are the gateway's Prometheus metrics, on a registry of their own so
// that several servers (tests, replicas in one process) never collide. Labels
// carry routes, statuses, outcomes and model ids only: never a payer, a key or a
// payment.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	payments  *prometheus.CounterVec
	settle    prometheus.Histogram
	upstreamT *prometheus.HistogramVec
	attempts  *prometheus.CounterVec
	credits   *prometheus.CounterVec
	ledgerT   *prometheus.HistogramVec
	topUps    *prometheus.CounterVec
}

// NewMetrics registers the gateway's metrics and the Go runtime's.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_http_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llm4agents_http_request_duration_seconds", Help: "HTTP request duration by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"route"}),
		payments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_payments_total",
			Help: "Paid request outcomes. Refused before the upstream: challenged (no payment), malformed, mismatch (paid for another quote), " +
				"stale (outside the authorization's time window), invalid (verify refused), unproven (a replay without proof of control), " +
				"conflict (same payment or id for another request), replayed (the claim is held, pending or spent: 409), " +
				"in_flight (the request that holds the payment is still running: 409 operation_in_flight), " +
				"store_down (the claim or recovery store failed: 503, nothing charged, nothing replayed). " +
				"Settlement: settled, pending (broadcast, not mined: 402 settlement_pending), " +
				"unresolved (nonce_already_used and not seen paid on chain: the claim stays pending, 409), failed (not paid: the answer withheld), " +
				"recovered (a pending or orphaned payment resolved by a later request and its staged or fresh answer served), " +
				"delivered_unpaid (an upto stream delivered whose settlement then failed: the seller's loss, logged with its charge). " +
				"Replay: replayed_promoted (a recorded answer served again with proof of control, X-Llm4agents-Replay).",
		}, []string{"outcome"}),
		settle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llm4agents_settle_duration_seconds", Help: "Time to settle a payment.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		upstreamT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llm4agents_upstream_duration_seconds", Help: "Upstream latency by model (to the whole answer, or to the first content chunk of a stream).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"model"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_upstream_attempts_total",
			Help: "Calls to each upstream provider of a model with fallbacks, by outcome: ok (it answered), refused (it refused the request " +
				"itself, 4xx: returned to the client, no other provider tried), not_served (404: it lacks the model as configured; the next is tried), " +
				"rate_limited (429: paused for its Retry-After; the next is tried), failed (unreachable, timed out, 5xx or a bad answer; the next is " +
				"tried, and failures in a row open its circuit), canceled (the client left), skipped (paused by an earlier 429; not called).",
		}, []string{"provider", "outcome"}),
		credits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_credit_calls_total",
			Help: "Credit-paid call outcomes (API key). Refused before the upstream, nothing held: invalid_key (401: unknown, revoked, expired), " +
				"not_allowed (403: model outside the key's scope), rate_limited (429), insufficient (402: balance or a key cap below the maximum cost), " +
				"store_down (503: the hold could not be placed), invalid_request (400), error (500, see the log). After the hold: charged (captured, receipt signed), " +
				"charged_no_receipt (captured, the receipt could not be signed or stored; see the log), " +
				"released (nothing delivered: an upstream error or the client gone before the first token), " +
				"unbilled (the capture failed: the answer went out and the hold waits for the sweep; the operator's loss), " +
				"loss (charged, and the cost exceeded the hold: the rest is the operator's loss, D16; also counted as charged).",
		}, []string{"outcome"}),
		ledgerT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llm4agents_credit_ledger_duration_seconds",
			Help: "Time the credit path waited for one ledger write, by operation (hold, capture, release, receipt), or, with leased credits, " +
				"for its admission against the replica's lease (lease: no store write unless a lease had to be opened).",
			// From 100us: a ledger write is one durable commit.
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}, []string{"op"}),
		topUps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_topups_total",
			Help: "Top-up answers. credited (settled and credited), presented_again (a settled top-up presented again: credited then " +
				"if it was not yet, never twice), not_final (settled, waiting for confirmations: 409). The background sweep logs what it credits.",
		}, []string{"outcome"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.payments, m.settle, m.upstreamT, m.attempts, m.credits, m.ledgerT, m.topUps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is where other components (the facilitator, the store) may register
// their own metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) request(route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (m *Metrics) payment(outcome string) { m.payments.WithLabelValues(outcome).Inc() }

func (m *Metrics) settleLatency(d time.Duration) { m.settle.Observe(d.Seconds()) }

func (m *Metrics) upstreamLatency(model string, d time.Duration) {
	m.upstreamT.WithLabelValues(model).Observe(d.Seconds())
}

// Attempt counts one call to an upstream provider of a model with
// fallbacks (upstream.AttemptMetrics).
func (m *Metrics) Attempt(provider, outcome string) {
	m.attempts.WithLabelValues(provider, outcome).Inc()
}

func (m *Metrics) credit(outcome string) { m.credits.WithLabelValues(outcome).Inc() }

func (m *Metrics) ledgerLatency(op string, d time.Duration) {
	m.ledgerT.WithLabelValues(op).Observe(d.Seconds())
}

func (m *Metrics) topUp(outcome string) { m.topUps.WithLabelValues(outcome).Inc() }

// CreditCount returns the count of one credit-paid call outcome (tests).
func (m *Metrics) CreditCount(outcome string) float64 {
	return testutil.ToFloat64(m.credits.WithLabelValues(outcome))
}

// PaymentCount returns the count of one payment outcome (tests, the demo).
func (m *Metrics) PaymentCount(outcome string) float64 {
	return testutil.ToFloat64(m.payments.WithLabelValues(outcome))
}

// paymentMetrics is the paywall's view of the metrics.
type paymentMetrics struct{ m *Metrics }

func (p paymentMetrics) Payment(outcome string)        { p.m.payment(outcome) }
func (p paymentMetrics) SettleLatency(d time.Duration) { p.m.settleLatency(d) }

// creditMetrics is what credits.Calls counts, on the gateway's metrics.
type creditMetrics struct{ m *Metrics }

func (c creditMetrics) Credit(outcome string)                    { c.m.credit(outcome) }
func (c creditMetrics) LedgerLatency(op string, d time.Duration) { c.m.ledgerLatency(op, d) }

// leaseCollector exports a replica's credit lease counters (D28), read
// from the leases at each scrape.
type leaseCollector struct {
	ls                                     *ledger.Leases
	leases, draws, flushErrors, issueWaits *prometheus.Desc
}

func newLeaseCollector(ls *ledger.Leases) *leaseCollector {
	return &leaseCollector{
		ls: ls,
		leases: prometheus.NewDesc("llm4agents_credit_leases_total",
			"Credit leases of this replica (D28): opened (a hold placed for a key's calls), closed (its draws captured, the rest returned), "+
				"open_failed (the store refused or failed to place one; the call was refused).", []string{"event"}, nil),
		draws: prometheus.NewDesc("llm4agents_credit_draws_total",
			"Leased calls' charges by outcome: written (recorded in the store with their receipt), unbilled (refused by the store because "+
				"the lease had ended: a free call, the operator's loss).", []string{"outcome"}, nil),
		flushErrors: prometheus.NewDesc("llm4agents_credit_draw_flush_errors_total",
			"Batches of draws the store failed to write; they are retried at the next flush.", nil, nil),
		issueWaits: prometheus.NewDesc("llm4agents_credit_lease_issue_waits_total",
			"Leased calls that found their lease's issued mark (the positions the store has recorded as handed out, written ahead "+
				"of the calls every flush) reached and waited on their path for it to be raised: waited (every such call), refused "+
				"(of those, refused with 503 because the store could not raise it in time; never answered unaccounted).", []string{"outcome"}, nil),
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.leases
	ch <- c.draws
	ch <- c.flushErrors
	ch <- c.issueWaits
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.ls.Stats().Snapshot()
	for event, v := range map[string]int64{"opened": n.Opened, "closed": n.Closed, "open_failed": n.OpenFailed} {
		ch <- prometheus.MustNewConstMetric(c.leases, prometheus.CounterValue, float64(v), event)
	}
	ch <- prometheus.MustNewConstMetric(c.draws, prometheus.CounterValue, float64(n.Drawn), "written")
	ch <- prometheus.MustNewConstMetric(c.draws, prometheus.CounterValue, float64(n.Unbilled), "unbilled")
	ch <- prometheus.MustNewConstMetric(c.flushErrors, prometheus.CounterValue, float64(n.FlushErrors))
	ch <- prometheus.MustNewConstMetric(c.issueWaits, prometheus.CounterValue, float64(n.IssueWaits), "waited")
	ch <- prometheus.MustNewConstMetric(c.issueWaits, prometheus.CounterValue, float64(n.IssueRefused), "refused")
}

// lostCallsCollector exports the bound of the leased calls lost by the
// replicas whose leases this process's sweep ended (D28), read from the
// ledger at each scrape. Any replica with credits sweeps, leased or not,
// so each lease ended is counted once, by the one that ended it.
type lostCallsCollector struct {
	l    *ledger.Ledger
	desc *prometheus.Desc
}

func newLostCallsCollector(l *ledger.Ledger) *lostCallsCollector {
	return &lostCallsCollector{l: l, desc: prometheus.NewDesc("llm4agents_credit_lost_calls_bound_total",
		"An upper bound of the leased calls answered and never billed because their replica died before writing them (the operator's "+
			"loss), counted when this process's sweep ends the dead replica's lease: the positions the lease had issued without a "+
			"recorded draw. It also counts calls in flight or released when the replica died, and the positions issued ahead of "+
			"its calls (at most 1024 per lease it held open). Each lease is counted once across replicas; see the log for each.", nil, nil)}
}

func (c *lostCallsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lostCallsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.l.LostCalls()))
}
