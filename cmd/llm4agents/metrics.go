package main

import (
	"context"
	"math/big"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llm4agents/llm4agents/internal/chain"
)

// signerBalanceGauge exports the facilitator signer's native balance on
// network (D19), read from the node at each scrape. It is telemetry in gwei,
// so a float64 is fine here: no amount is ever computed from it.
func signerBalanceGauge(reg prometheus.Registerer, s *chain.Sender, network string) error {
	gwei := big.NewInt(1_000_000_000)
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "llm4agents_signer_balance_gwei",
		Help:        "Native balance (ETH) of the facilitator's signer on each network it settles on, in gwei, read at scrape time; -1 when the node did not answer.",
		ConstLabels: prometheus.Labels{"signer": s.Address().Hex(), "network": network},
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		bal, err := s.Balance(ctx)
		if err != nil {
			return -1
		}
		f, _ := new(big.Float).SetInt(new(big.Int).Quo(bal, gwei)).Float64()
		return f
	}))
}

// withMetrics serves h, plus reg at /metrics.
func withMetrics(h http.Handler, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", h)
	return mux
}
