package dashboard

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/credits"
)

// The sign-in, from the page's script:
//
//	POST /dashboard/nonce  {"address": "0x..."}            -> {"message": EIP-4361 text with a new nonce}
//	(the wallet signs the message: personal_sign)
//	POST /dashboard/signin {"message": ..., "signature": "0x..."} -> 204 and the session cookie
//
// The server writes the message, so the script needs no EIP-55 or clock of
// its own; the signature still covers every word of it, and the sign-in
// checks it as it checks any other (credits.Auth.SignIn). Both are JSON
// posts from the dashboard's origin, so a cross-site page can neither send
// them without a CORS preflight nor read their answers.

// signInStatement is the line a wallet shows the user above the message's
// fields.
const signInStatement = "Sign in to the llm4agents dashboard."

// maxSignInBody bounds the sign-in bodies: a message and a signature.
const maxSignInBody = 2*credits.MaxMessageBytes + 8<<10

// apiError is a JSON answer of the sign-in routes.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// api serves a sign-in route: JSON in and out, rate-limited, same origin.
func (h *Handler) api(serve func(w http.ResponseWriter, r *http.Request, body []byte) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h.apiCall(w, r, serve)
		if err == nil {
			return
		}
		ae, ok := errors.AsType[*apiError](err)
		if !ok {
			h.log.ErrorContext(r.Context(), "dashboard sign-in failed", "path", r.URL.Path, "err", err)
			ae = &apiError{Status: http.StatusServiceUnavailable, Message: "the gateway could not sign you in just now; try again in a moment"}
		} else {
			h.log.InfoContext(r.Context(), "dashboard sign-in refused", "path", r.URL.Path, "status", ae.Status)
		}
		writeJSON(w, ae.Status, map[string]string{"error": ae.Message})
	}
}

func (h *Handler) apiCall(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request, []byte) error) error {
	if !h.sameOrigin(r) {
		return &apiError{Status: http.StatusForbidden, Message: "sign in from the dashboard's own page"}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return &apiError{Status: http.StatusUnsupportedMediaType, Message: "send application/json"}
	}
	if !h.signIns.Allow() {
		w.Header().Set("Retry-After", "5")
		return &apiError{Status: http.StatusTooManyRequests, Message: "too many sign-in attempts; try again in a few seconds"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSignInBody))
	if err != nil {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: "the request body is too large"}
	}
	return serve(w, r, body)
}

func decode(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		return &apiError{Status: http.StatusBadRequest, Message: "the body is not the expected JSON object"}
	}
	return nil
}

// nonce answers the message for the wallet to sign.
func (h *Handler) nonce(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Address string `json:"address"`
	}
	if err := decode(body, &req); err != nil {
		return err
	}
	if !common.IsHexAddress(req.Address) || !strings.HasPrefix(req.Address, "0x") {
		return &apiError{Status: http.StatusBadRequest, Message: "address is not a 0x-prefixed Ethereum address"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	m, err := h.message(ctx, common.HexToAddress(req.Address))
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]string{"message": m})
	return nil
}

// message writes the sign-in message for addr, with a new nonce.
func (h *Handler) message(ctx context.Context, addr common.Address) (string, error) {
	nonce, _, err := h.cfg.Sessions.IssueNonce(ctx)
	if err != nil {
		return "", err
	}
	m := credits.Message{
		Domain: h.host, Address: addr, Statement: signInStatement,
		URI: h.cfg.Origin, Version: "1", ChainID: h.cfg.ChainID, Nonce: nonce, IssuedAt: h.cfg.Now().UTC(),
	}
	return m.String(), nil
}

// demoSignIn signs in as one of the demo's accounts: the server signs the
// message with the account's dev key, and the sign-in checks it as any
// other. A form post from the dashboard's own page, rate-limited.
func (h *Handler) demoSignIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	i, err := strconv.Atoi(r.PostFormValue("account"))
	switch {
	case !h.sameOrigin(r):
		h.render(w, r, http.StatusForbidden, "error", view{Title: "Refused", Body: errorPage{Title: "Refused", Message: "Sign in from the dashboard's own page."}})
		return
	case err != nil || i < 0 || i >= len(h.cfg.DemoAccounts):
		h.notFound(w, r)
		return
	case !h.signIns.Allow():
		w.Header().Set("Retry-After", "5")
		h.render(w, r, http.StatusTooManyRequests, "error", view{Title: "Slow down", Body: errorPage{Title: "Slow down", Message: "Too many sign-in attempts; try again in a few seconds."}})
		return
	}
	key := h.cfg.DemoAccounts[i].Key
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	text, err := h.message(ctx, crypto.PubkeyToAddress(key.PublicKey))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sig, err := crypto.Sign(accounts.TextHash([]byte(text)), key)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sig[64] += 27
	token, s, err := h.cfg.Sessions.SignIn(ctx, text, sig)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.setSession(w, token, s.ExpiresAt)
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// signIn checks the signed message and sets the session cookie.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Message   string `json:"message"`
		Signature string `json:"signature"`
	}
	if err := decode(body, &req); err != nil {
		return err
	}
	sig, ok := strings.CutPrefix(req.Signature, "0x")
	raw, err := hex.DecodeString(sig)
	if !ok || err != nil || len(raw) == 0 || len(raw) > maxSignatureBytes {
		return &apiError{Status: http.StatusBadRequest, Message: "signature is not 0x-prefixed hex"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	token, s, err := h.cfg.Sessions.SignIn(ctx, req.Message, raw)
	if se, refused := errors.AsType[*credits.SignInError](err); refused {
		return &apiError{Status: http.StatusUnauthorized, Message: "sign-in refused: " + se.Detail}
	}
	if err != nil {
		return err
	}
	h.setSession(w, token, s.ExpiresAt)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// maxSignatureBytes bounds a sign-in signature: 65 bytes from a key, more
// from a contract wallet (EIP-1271).
const maxSignatureBytes = 4 << 10

// logout ends the session and clears the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request, a account) error {
	if err := h.cfg.Sessions.SignOut(r.Context(), a.Token); err != nil {
		return err
	}
	h.clearSession(w)
	http.Redirect(w, r, Path, http.StatusSeeOther)
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v) // maps of strings always marshal
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
