package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// The receipt log's routes (D30). The checkpoint and the tiles are public:
// a leaf shows no payer, key or request id, only a commitment to its
// receipt. A receipt's proof is its payer's, behind the same access as the
// receipt itself.
//
//	GET /log/checkpoint          the latest signed checkpoint (C2SP tlog-checkpoint, signed-note)
//	GET /log/tile/{L}/{N}[.p/W]  hash tiles; /log/tile/entries/{N}[.p/W] entry bundles (C2SP tlog-tiles)
//	GET /log/anchors[?limit=N]   the latest checkpoints written on chain, newest first
//	GET /v1/receipts/{id}/proof  the receipt's leaf index and its inclusion proof

// logReadTimeout bounds the store reads of one log request.
const logReadTimeout = 5 * time.Second

// logUnavailable is the answer when the store cannot be read.
func logUnavailable(err error) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "log_unavailable",
		Message: "the receipt log cannot be read right now; retry shortly", Err: err}
}

// getCheckpoint serves GET /log/checkpoint.
func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), logReadTimeout)
	defer cancel()
	b, err := s.cfg.Log.Checkpoint(ctx)
	if err != nil {
		return logUnavailable(err)
	}
	// Readers poll it: a second of caching is a second more of merge delay.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b) // #nosec G705 -- a signed note sent as text/plain with nosniff
	return nil
}

// getTile serves GET /log/tile/...: a full tile never changes and is
// cached for good; a partial one grows with the log.
func (s *Server) getTile(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), logReadTimeout)
	defer cancel()
	b, full, err := s.cfg.Log.Tile(ctx, "tile/"+r.PathValue("path"))
	switch {
	case errors.Is(err, receiptlog.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "tile_not_found",
			Message: "no such tile in the log: not a tlog-tiles path, or past the log's size", Err: err}
	case err != nil:
		return logUnavailable(err)
	}
	if full {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b) // #nosec G705 -- binary tile data sent as application/octet-stream with nosniff
	return nil
}

// getReceiptProof serves GET /v1/receipts/{id}/proof to whoever sees the
// receipt (getReceipt's rule). A receipt whose leaf waits in the queue is
// 404 receipt_not_logged_yet with Retry-After, until its logBy.
func (s *Server) getReceiptProof(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.visibleReceipt(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), logReadTimeout)
	defer cancel()
	p, err := s.cfg.Log.Proof(ctx, rec.RequestID)
	switch {
	case errors.Is(err, receiptlog.ErrPending):
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "receipt_not_logged_yet",
			Message: "the receipt is queued for the log and not included yet; it will be by its logBy time",
			Header:  http.Header{"Retry-After": {"1"}}}
	case errors.Is(err, receiptlog.ErrNotFound):
		// Kept before the log was on: it has no leaf.
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "receipt_not_logged",
			Message: "this receipt was issued before the gateway kept a receipt log; it has no proof"}
	case err != nil:
		return logUnavailable(err)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, p)
	return nil
}

// defaultAnchorsPage is the page size of GET /log/anchors without ?limit=.
const defaultAnchorsPage = 20

// getAnchors serves GET /log/anchors?limit=N: the latest anchors of the
// log's checkpoints on chain (1..receipt.MaxAnchors, default
// defaultAnchorsPage), newest first, each with its transaction and, once the
// gateway saw it mined, its block. Older anchors are on the chain itself, in
// the anchor contract's events. 404 log_not_anchored when the gateway does
// not anchor its log.
func (s *Server) getAnchors(w http.ResponseWriter, r *http.Request) error {
	limit := defaultAnchorsPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > receipt.MaxAnchors {
			msg := fmt.Sprintf("limit must be an integer from 1 to %d", receipt.MaxAnchors)
			return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: msg,
				Detail: chat.ErrorDetail{Message: msg, Type: "invalid_request_error", Param: "limit", Code: "invalid_request"}}
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), logReadTimeout)
	defer cancel()
	as, err := s.cfg.Log.Anchors(ctx, limit)
	switch {
	case errors.Is(err, receiptlog.ErrNotAnchored):
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "log_not_anchored",
			Message: "this gateway does not anchor its receipt log on chain"}
	case err != nil:
		return logUnavailable(err)
	}
	b, err := receipt.MarshalAnchors(as)
	if err != nil {
		return fmt.Errorf("encode anchors: %w", err)
	}
	// A new anchor comes every few minutes at most; readers poll.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(append(b, '\n')) // #nosec G705 -- JSON sent as application/json with nosniff, not HTML
	return nil
}

// wellKnownLog is the log's member of the well-known document.
func (s *Server) wellKnownLog() *receipt.WellKnownLog {
	l := s.cfg.Log
	if l == nil {
		return nil
	}
	wk := l.WellKnown()
	return &wk
}
