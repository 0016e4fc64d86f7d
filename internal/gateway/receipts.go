package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/store"
)

// The receipt routes (D18): GET /v1/receipts/{id} and
// GET /v1/receipts. Who sees what (an owner hands a capped key to
// an agent or a sub-team, which must not read what the owner's other keys
// spent):
//
//	Bearer sk-l4a-... (an API key)        -> that key's receipts only
//	Bearer sess-l4a-... (a sign-in session) -> every receipt of the owner,
//	                                         or one key's with ?key_id=
//
// A receipt outside the asker's view is answered exactly as a missing one, so
// its existence is never revealed. A session's view does not consult the keys
// table: a key revoked after its calls leaves its receipts visible to the
// owner.

// defaultReceiptsPage is the page size of GET /v1/receipts without ?limit=.
const defaultReceiptsPage = 20

// receiptReader is who asks for receipts.
type receiptReader struct {
	// owner is the account asking, through a key of its own or a session.
	owner string
	// keyID is the id of the API key the request carried; empty for a
	// sign-in session, which sees every key's receipts.
	keyID string
}

// sees reports whether rec is in r's view: the owner's, and the key's
// when r asked with a key.
func (r receiptReader) sees(rec store.StoredReceipt) bool {
	return rec.Owner == r.owner && (r.keyID == "" || rec.KeyID == r.keyID)
}

// receiptReader authenticates a receipts request: an API key or a sign-in
// session of the owner. Neither secret reaches an answer or a log.
func (s *Server) receiptReader(r *http.Request) (receiptReader, error) {
	if err := refusePaymentOnFreeRoute(r); err != nil {
		return receiptReader{}, err
	}
	tok := bearer(r)
	switch {
	case credits.IsKey(tok) && s.cfg.Credits.Keys != nil:
		key, err := s.calls.Authenticate(r.Context(), tok)
		if err != nil {
			return receiptReader{}, err
		}
		return receiptReader{owner: key.Owner, keyID: key.ID}, nil
	case strings.HasPrefix(tok, credits.SessionPrefix) && s.cfg.Credits.Auth != nil:
		ctx, cancel := context.WithTimeout(r.Context(), creditStoreTimeout)
		defer cancel()
		sess, err := s.cfg.Credits.Auth.Session(ctx, tok)
		switch {
		case errors.Is(err, credits.ErrNoSession):
			return receiptReader{}, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_session",
				Message: "the session token is unknown or expired; sign in again"}
		case err != nil:
			return receiptReader{}, creditStoreUnavailable(err)
		}
		return receiptReader{owner: sess.Owner}, nil
	}
	return receiptReader{}, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "authentication_required",
		Message: "send Authorization: Bearer with an API key (sk-l4a-...) or a sign-in session token (sess-l4a-...)"}
}

func (s *Server) receiptStore() (store.Receipts, error) {
	if s.cfg.Credits.Receipts == nil {
		return nil, &apiError{Status: http.StatusNotImplemented, Type: "server_error", Code: "receipts_not_kept",
			Message: "this gateway keeps no receipts; each answer carries its own"}
	}
	return s.cfg.Credits.Receipts, nil
}

// receiptAccess is the first step of both receipt routes: who asks, and the
// store that keeps the receipts.
func (s *Server) receiptAccess(r *http.Request) (receiptReader, store.Receipts, error) {
	who, err := s.receiptReader(r)
	if err != nil {
		return receiptReader{}, nil, err
	}
	rs, err := s.receiptStore()
	if err != nil {
		return receiptReader{}, nil, err
	}
	return who, rs, nil
}

// visibleReceipt returns the receipt of the request's {id} if its asker
// sees it; any other is answered as a missing one.
func (s *Server) visibleReceipt(r *http.Request) (store.StoredReceipt, error) {
	who, rs, err := s.receiptAccess(r)
	if err != nil {
		return store.StoredReceipt{}, err
	}
	notFound := &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "receipt_not_found",
		Message: "no receipt with this id for this account"}
	id := r.PathValue("id")
	if !store.ValidID(id) {
		return store.StoredReceipt{}, notFound
	}
	ctx, cancel := context.WithTimeout(r.Context(), creditStoreTimeout)
	defer cancel()
	rec, err := rs.Receipt(ctx, id)
	if ls := s.cfg.Credits.Leases; ls != nil && errors.Is(err, store.ErrNotFound) {
		// A leased call's receipt is written with its draw, within a flush
		// interval of its answer (D28): write this replica's, give the
		// others' a flush, and look again.
		ls.Flush(ctx)
		if rec, err = rs.Receipt(ctx, id); errors.Is(err, store.ErrNotFound) {
			select {
			case <-time.After(2 * ls.FlushInterval()):
			case <-ctx.Done():
			}
			rec, err = rs.Receipt(ctx, id)
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.StoredReceipt{}, notFound
	case err != nil:
		return store.StoredReceipt{}, creditStoreUnavailable(err)
	case !who.sees(rec):
		return store.StoredReceipt{}, notFound
	}
	return rec, nil
}

// getReceipt serves GET /v1/receipts/{id}: the stored envelope, to the
// asker who sees it (an API key: its own calls; a session: the owner's).
// Any other receipt is answered as a missing one.
func (s *Server) getReceipt(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.visibleReceipt(r)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(rec.Envelope) // #nosec G705 -- the stored JSON envelope sent as application/json, not HTML
	return nil
}

// receiptList is the body of GET /v1/receipts.
type receiptList struct {
	Object string            `json:"object"`
	Data   []json.RawMessage `json:"data"`
	// HasMore says a full page was returned: there may be more, the page
	// before=NextBefore. NextBefore is the store's order of the page's last
	// receipt (its ledger seq for a call held on its own; a drawn number
	// for an x402 payment's or a leased call's, whose signed ledgerSeq is
	// not the list's order).
	HasMore    bool  `json:"has_more"`
	NextBefore int64 `json:"next_before,omitempty"`
}

// listReceipts serves GET /v1/receipts?limit=N&before=SEQ&key_id=ID: the
// receipts the asker sees, newest first; the next page is
// before=next_before. key_id narrows a session's list to one key.
func (s *Server) listReceipts(w http.ResponseWriter, r *http.Request) error {
	who, rs, err := s.receiptAccess(r)
	if err != nil {
		return err
	}
	q, err := receiptsQuery(r, who)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), creditStoreTimeout)
	defer cancel()
	if ls := s.cfg.Credits.Leases; ls != nil {
		// This replica's leased calls' receipts are listed once their
		// draws are written: write them first (another replica's show
		// within its flush interval, D28).
		ls.Flush(ctx)
	}
	recs, err := rs.ReceiptsOf(ctx, q)
	if err != nil {
		return creditStoreUnavailable(err)
	}
	list := receiptList{Object: "list", Data: make([]json.RawMessage, 0, len(recs))}
	for _, rec := range recs {
		list.Data = append(list.Data, rec.Envelope)
	}
	if len(recs) == q.Limit {
		list.HasMore, list.NextBefore = true, recs[len(recs)-1].Seq
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, list)
	return nil
}

// receiptsQuery reads the page of GET /v1/receipts that who asks for: limit
// (1..store.MaxReceiptsPage, default defaultReceiptsPage), before (a ledger
// seq, 0 or absent for the newest) and key_id. A request with an API key is
// held to that key whatever it asks; key_id may only repeat the key's id.
func receiptsQuery(r *http.Request, who receiptReader) (store.ReceiptsQuery, error) {
	bad := func(param, msg string) error {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: msg,
			Detail: chat.ErrorDetail{Message: msg, Type: "invalid_request_error", Param: param, Code: "invalid_request"}}
	}
	qv := r.URL.Query()
	q := store.ReceiptsQuery{Owner: who.owner, KeyID: who.keyID, Limit: defaultReceiptsPage}
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxReceiptsPage {
			return q, bad("limit", fmt.Sprintf("limit must be an integer from 1 to %d", store.MaxReceiptsPage))
		}
		q.Limit = n
	}
	if v := qv.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return q, bad("before", "before must be a ledger sequence number (a non-negative integer)")
		}
		q.Before = n
	}
	if qv.Has("key_id") {
		v := qv.Get("key_id")
		switch {
		case strings.Contains(v, credits.KeyPrefix) || strings.Contains(v, credits.SessionPrefix):
			// A secret pasted in the wrong place: name the mistake, never
			// a byte of it, since the message is logged.
			return q, bad("key_id", "key_id must be a key's id (0x...), not an API key or session token; the value is not repeated here")
		case !store.ValidID(v):
			return q, bad("key_id", fmt.Sprintf("key_id %q is not a key id (0x and 64 hex digits, as GET /v1/keys lists them)", truncate(v, 20)))
		case who.keyID != "" && v != who.keyID:
			return q, bad("key_id", "an API key lists only its own receipts; sign in with the owner's wallet to list another key's")
		}
		q.KeyID = v
	}
	return q, nil
}
