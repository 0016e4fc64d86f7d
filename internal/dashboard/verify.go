package dashboard

import (
	"context"
	"errors"
	"net/http"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Prover proves a receipt's place in the receipt log (receiptlog.Log).
type Prover interface {
	Proof(ctx context.Context, requestID string) (receipt.Proof, error)
}

// provedPerPage bounds the log proofs one page asks for, for its newest
// receipts: each proof reads the log's tiles, and the newest receipts are
// the ones a buyer checks.
const provedPerPage = 20

// NewVerifier returns a Config.Verify that checks a receipt's signature
// against the gateway's receipt signer (and domain) and, with a log and
// when asked (prove), proves its inclusion against a checkpoint signed by
// the log's key: the checks
// `llm4agents receipts verify` runs, done here for the page. log and key
// may be nil (no receipt log).
func NewVerifier(signer common.Address, d receipt.Domain, log Prover, key note.Verifier) func(ctx context.Context, requestID string, r *receipt.Receipt, sig []byte, prove bool) Verification {
	return func(ctx context.Context, requestID string, r *receipt.Receipt, sig []byte, prove bool) Verification {
		var v Verification
		if got, err := receipt.Verify(r, sig, d); err != nil || got != signer {
			v.Problem = "bad signature"
			return v
		}
		v.Signed = true
		if log == nil || key == nil || !prove {
			return v
		}
		p, err := log.Proof(ctx, requestID)
		switch {
		case errors.Is(err, receiptlog.ErrPending):
			v.Pending = true
		case errors.Is(err, receiptlog.ErrNotFound):
			// Issued before the log was on: nothing to prove.
		case err != nil:
			v.Problem = "signed · log unreachable"
		default:
			cp, err := receipt.VerifyInclusion(&p, key, d, r)
			if err != nil {
				v.Problem = "signed · NOT proven in the log"
				return v
			}
			v.Logged, v.LogIndex, v.LogSize = true, p.Index, cp.Size
		}
		return v
	}
}

// Unavailable serves /dashboard on a gateway that cannot sign anyone in: a
// page that says why and how to turn it on.
func Unavailable(reason string) http.Handler {
	pages, err := parsePages()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotFound)
		_ = pages["error"].Execute(w, view{Title: "Dashboard off", Body: errorPage{Title: "The dashboard is off", Message: reason}})
	})
}
