package gateway

import (
	"math/big"
	"net/http"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Credits is what prepaid credits need (MISSION C1, C2, C4; DECISIONS D12,
// D16-D18).
type Credits struct {
	Ledger *ledger.Ledger
	Keys   *credits.Keys
	// Auth checks sign-in sessions (the balance and receipts routes accept a
	// session token as well as a key).
	Auth *credits.Auth
	// Account serves the account routes: /v1/auth/*, /v1/keys.
	Account http.Handler
	// Signer signs receipts; its address and domain are published at
	// /.well-known/llm4agents.json.
	Signer   *credits.Signer
	Receipts store.Receipts
	// TopUpMin and TopUpMax bound a top-up, in atomic units.
	TopUpMin, TopUpMax *big.Int
}

// creditChat serves a chat completion paid from credits through an API key.
func (s *Server) creditChat(_ http.ResponseWriter, _ *http.Request, _ *chat.Request, _ []byte) error {
	return notYet()
}

func (s *Server) listReceipts(http.ResponseWriter, *http.Request) error { return notYet() }

func (s *Server) getReceipt(http.ResponseWriter, *http.Request) error { return notYet() }

func notYet() error {
	return &apiError{Status: http.StatusNotImplemented, Type: "server_error", Code: "not_implemented", Message: "credits are not served yet"}
}
