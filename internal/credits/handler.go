package credits

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// Account routes.
const (
	PathNonce  = "/v1/auth/nonce"
	PathVerify = "/v1/auth/verify"
	PathKeys   = "/v1/keys"
)

// Body limits of the account routes.
const (
	maxVerifyBody = 2*MaxMessageBytes + 2*maxSignatureBytes + 1024 // the message JSON-escaped, and the signature in hex
	maxKeyBody    = 8 << 10
	maxNonceBody  = 64
)

// Key field bounds.
const (
	maxRatePerMinute = 1_000_000
	// maxTokensPerMinute is ten billion: above any provider's limit.
	maxTokensPerMinute = 10_000_000_000
	maxKeyLifetime     = 10 * 366 * 24 * time.Hour
)

// DefaultNoncesPerMinute bounds how many nonces one replica issues per
// minute: issuing one is an unauthenticated store write.
const DefaultNoncesPerMinute = 600

// Handler serves the account routes: sign-in (POST /v1/auth/nonce, POST
// /v1/auth/verify) and key management for a signed-in owner (POST and GET
// /v1/keys, DELETE and PATCH /v1/keys/{id}, with `Authorization: Bearer sess-l4a-...`).
// Bodies are strict JSON with size limits; errors are OpenAI-style JSON.
// Responses that carry a secret (a new key, a session token) are marked
// no-store; no secret is ever logged or echoed in an error.
type Handler struct {
	auth *Auth
	st   store.Keys
	log  *slog.Logger
	// Now is the clock new keys' expiry is judged by; NewHandler sets it to
	// time.Now. Set it before the first request.
	Now func() time.Time
	// NoncesPerMinute bounds the nonces issued per minute by this replica;
	// NewHandler sets DefaultNoncesPerMinute.
	NoncesPerMinute int
	// KeyChanged, when set, is told the hash of each key this handler
	// revoked or changed (Keys.Forget, so this replica's cache of it goes
	// at once).
	KeyChanged func(hash string)

	nonces limiter
}

// NewHandler returns the account routes' handler. A nil log discards log
// output.
func NewHandler(auth *Auth, st store.Keys, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{auth: auth, st: st, log: log.With("component", "credits"), Now: time.Now, NoncesPerMinute: DefaultNoncesPerMinute}
}

// NewSignInHandler returns a handler of the sign-in routes alone
// (PathNonce, PathVerify), for a gateway that sells no credits and so
// issues no API keys: every other path is answered 404. A nil log discards
// log output.
func NewSignInHandler(auth *Auth, log *slog.Logger) *Handler { return NewHandler(auth, nil, log) }

// RequestError is an error answered to the client: status, type and code, and a
// message safe to show. Err is logged for a 5xx and never sent.
type RequestError struct {
	Status  int
	Type    string
	Code    string
	Message string
	Err     error
}

func (e *RequestError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func (e *RequestError) Unwrap() error { return e.Err }

func badRequest(code, msg string) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Message: msg}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, err := h.route(w, r)
	if err == nil {
		return
	}
	he, ok := errors.AsType[*RequestError](err)
	if !ok {
		he = &RequestError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: "internal error", Err: err}
	}
	if he.Status >= 500 {
		h.log.ErrorContext(r.Context(), "account request failed", "route", route, "status", he.Status, "code", he.Code, "err", he.Err)
	} else {
		h.log.InfoContext(r.Context(), "account request refused", "route", route, "status", he.Status, "code", he.Code)
	}
	if he.Status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", allowed(route))
	}
	writeJSON(w, he.Status, chat.ErrorBody{Error: chat.ErrorDetail{Message: he.Message, Type: he.Type, Code: he.Code}})
}

// route dispatches r and returns the route name, for the log.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) (string, error) {
	path := r.URL.Path
	switch {
	case path == PathNonce:
		if r.Method != http.MethodPost {
			return path, errMethod
		}
		return path, h.nonce(w, r)
	case path == PathVerify:
		if r.Method != http.MethodPost {
			return path, errMethod
		}
		return path, h.verify(w, r)
	case h.st == nil:
		// A sign-in handler (NewSignInHandler) issues no keys.
	case path == PathKeys:
		switch r.Method {
		case http.MethodPost:
			return path, h.createKey(w, r)
		case http.MethodGet:
			return path, h.listKeys(w, r)
		}
		return path, errMethod
	case strings.HasPrefix(path, PathKeys+"/"):
		const route = PathKeys + "/{id}"
		id := strings.TrimPrefix(path, PathKeys+"/")
		switch r.Method {
		case http.MethodDelete:
			return route, h.revokeKey(w, r, id)
		case http.MethodPatch:
			return route, h.updateKey(w, r, id)
		}
		return route, errMethod
	}
	return path, &RequestError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: "no such route"}
}

var errMethod = &RequestError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed", Message: "method not allowed"}

func allowed(route string) string {
	switch route {
	case PathKeys:
		return "GET, POST"
	case PathKeys + "/{id}":
		return "DELETE, PATCH"
	}
	return "POST"
}

// nonceResponse answers POST /v1/auth/nonce: what the buyer needs to write
// its EIP-4361 message.
type nonceResponse struct {
	Nonce     string `json:"nonce"`
	ExpiresAt string `json:"expiresAt"`
	Domain    string `json:"domain"`
	URI       string `json:"uri"`
	ChainID   uint64 `json:"chainId"`
}

func (h *Handler) nonce(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(w, r, maxNonceBody, false)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) > 0 {
		var empty struct{}
		if err := decodeStrict(b, &empty); err != nil {
			return err
		}
	}
	if !h.nonces.take("", h.NoncesPerMinute, h.Now()) {
		return &RequestError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limited", Message: "too many sign-in nonces requested; retry in a few seconds"}
	}
	nonce, exp, err := h.auth.IssueNonce(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, nonceResponse{Nonce: nonce, ExpiresAt: exp.UTC().Format(time.RFC3339), Domain: h.auth.host,
		URI: h.auth.Origin(), ChainID: h.auth.chainID})
	return nil
}

type verifyRequest struct {
	Message   *string `json:"message"`
	Signature *string `json:"signature"`
}

type verifyResponse struct {
	Token     string `json:"token"`
	Account   string `json:"account"`
	ExpiresAt string `json:"expiresAt"`
}

func (h *Handler) verify(w http.ResponseWriter, r *http.Request) error {
	// A sign-in may cost an eth_call (a contract wallet's EIP-1271 check):
	// attempts are bounded per replica as nonces are.
	if !h.nonces.take("verify", h.NoncesPerMinute, h.Now()) {
		return &RequestError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limited", Message: "too many sign-in attempts; retry in a few seconds"}
	}
	b, err := readBody(w, r, maxVerifyBody, true)
	if err != nil {
		return err
	}
	var req verifyRequest
	if err := decodeStrict(b, &req); err != nil {
		return err
	}
	if req.Message == nil || req.Signature == nil {
		return badRequest("invalid_request", "message and signature are required")
	}
	sig, ok := decodeSignature(*req.Signature)
	if !ok {
		return badRequest("invalid_signature", fmt.Sprintf("signature is not 0x and hex of 1 to %d bytes", maxSignatureBytes))
	}
	token, s, err := h.auth.SignIn(r.Context(), *req.Message, sig)
	se, refused := errors.AsType[*SignInError](err)
	switch {
	case refused && se.Reason == ReasonMalformed:
		return badRequest("invalid_sign_in_message", "sign-in refused: "+se.Detail)
	case refused:
		return &RequestError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: string(se.Reason), Message: "sign-in refused: " + se.Detail}
	case err != nil:
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, verifyResponse{Token: token, Account: s.Owner, ExpiresAt: s.ExpiresAt.Format(time.RFC3339)})
	return nil
}

// session returns the owner signed in by r's bearer session token.
func (h *Handler) session(r *http.Request) (string, error) {
	unauth := func(msg string) error {
		return &RequestError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "session_required", Message: msg}
	}
	auth := r.Header.Values("Authorization")
	if len(auth) != 1 {
		return "", unauth("sign in with your wallet (POST " + PathVerify + ") and send Authorization: Bearer <session token>")
	}
	token, ok := strings.CutPrefix(auth[0], "Bearer ")
	if !ok {
		return "", unauth("Authorization is not a bearer session token")
	}
	s, err := h.auth.Session(r.Context(), token)
	switch {
	case errors.Is(err, ErrNoSession):
		return "", unauth("the session token is unknown or expired; sign in again")
	case err != nil:
		return "", err
	}
	return s.Owner, nil
}

// KeyRequest is the body of POST /v1/keys. Amounts are decimal strings
// of atomic units of the payment asset; absent caps do not bind.
type KeyRequest struct {
	Name          string   `json:"name"`
	TotalCap      *string  `json:"totalCap"`
	PeriodCap     *string  `json:"periodCap"`
	PeriodSeconds *int64   `json:"periodSeconds"`
	ExpiresAt     *string  `json:"expiresAt"`
	Models        []string `json:"models"`
	RatePerMinute int      `json:"ratePerMinute"`
	// TokensPerMinute bounds the tokens (prompt plus output bound) the
	// key's calls may take per minute; 0 for none.
	TokensPerMinute int64 `json:"tokensPerMinute"`
}

// keyView is a key as its owner sees it: never the secret or its hash.
type keyView struct {
	ID              string   `json:"id"`
	Object          string   `json:"object"`
	Key             string   `json:"key,omitempty"` // only in the answer that creates it
	Name            string   `json:"name"`
	Account         string   `json:"account"`
	TotalCap        *string  `json:"totalCap"`
	PeriodCap       *string  `json:"periodCap"`
	PeriodSeconds   *int64   `json:"periodSeconds"`
	ExpiresAt       *string  `json:"expiresAt"`
	Models          []string `json:"models"`
	RatePerMinute   int      `json:"ratePerMinute"`
	TokensPerMinute int64    `json:"tokensPerMinute"`
	CreatedAt       string   `json:"createdAt"`
	RevokedAt       *string  `json:"revokedAt"`
}

func viewOf(k store.APIKey) keyView {
	v := keyView{ID: k.ID, Object: "api_key", Name: k.Name, Account: k.Owner, Models: k.Models, RatePerMinute: k.RatePerMinute,
		TokensPerMinute: k.TokensPerMinute, CreatedAt: k.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if v.Models == nil {
		v.Models = []string{}
	}
	if k.TotalCap != store.NoCap {
		s := strconv.FormatInt(k.TotalCap, 10)
		v.TotalCap = &s
	}
	if k.PeriodCap != store.NoCap {
		s, p := strconv.FormatInt(k.PeriodCap, 10), int64(k.Period/time.Second)
		v.PeriodCap, v.PeriodSeconds = &s, &p
	}
	if !k.ExpiresAt.IsZero() {
		s := k.ExpiresAt.UTC().Format(time.RFC3339Nano)
		v.ExpiresAt = &s
	}
	if k.Revoked() {
		s := k.RevokedAt.UTC().Format(time.RFC3339Nano)
		v.RevokedAt = &s
	}
	return v
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) error {
	owner, err := h.session(r)
	if err != nil {
		return err
	}
	b, err := readBody(w, r, maxKeyBody, true)
	if err != nil {
		return err
	}
	var req KeyRequest
	if err := decodeStrict(b, &req); err != nil {
		return err
	}
	secret, stored, err := h.CreateKey(r.Context(), owner, req)
	if err != nil {
		return err
	}
	v := viewOf(stored)
	v.Key = secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// CreateKey creates the key req asks for, for owner (a signed-in account),
// and returns its secret, to be shown once, and the key as stored. A refusal
// is a *RequestError whose message is safe to show.
func (h *Handler) CreateKey(ctx context.Context, owner string, req KeyRequest) (string, store.APIKey, error) {
	k, err := h.keyFrom(req)
	if err != nil {
		return "", store.APIKey{}, err
	}
	secret, id, err := NewKey()
	if err != nil {
		return "", store.APIKey{}, err
	}
	k.ID, k.Hash, k.Owner = id, HashSecret(secret), owner
	stored, err := h.st.CreateKey(ctx, k)
	switch {
	case errors.Is(err, store.ErrConflict):
		return "", store.APIKey{}, &RequestError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "too_many_keys",
			Message: fmt.Sprintf("an account may have at most %d keys that are not revoked, and %d in all: revoke one it no longer uses", store.MaxKeysPerOwner, store.MaxStoredKeysPerOwner)}
	case err != nil:
		return "", store.APIKey{}, err
	}
	h.log.InfoContext(ctx, "created API key", "account", owner, "key_id", id)
	return secret, stored, nil
}

// keyFrom checks a create request and returns the key it asks for, without
// id, hash or owner.
func (h *Handler) keyFrom(req KeyRequest) (store.APIKey, error) {
	k := store.APIKey{TotalCap: store.NoCap, PeriodCap: store.NoCap}
	err := h.applyKey(&k, req.change())
	return k, err
}

// optional is a member of a PATCH body that tells absent from null:
// encoding/json leaves it zero when the member is absent and calls
// UnmarshalJSON, with "null", when it is null. Set reports that the member
// was present, Null that it was null; V is its value otherwise.
type Optional[T any] struct {
	Set, Null bool
	V         T
}

func (o *Optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Null = true
		return nil
	}
	if err := json.Unmarshal(b, &o.V); err != nil {
		return fmt.Errorf("decode optional member: %w", err)
	}
	return nil
}

// KeyChange is the body of PATCH /v1/keys/{id}, with the members and JSON
// types of KeyRequest. An absent member keeps the key's value; a null
// one sets what an absent member means at creation: no cap (totalCap, and
// periodCap with periodSeconds), no expiry, every model, no rate limit, no
// name.
type KeyChange struct {
	Name            Optional[string]   `json:"name"`
	TotalCap        Optional[string]   `json:"totalCap"`
	PeriodCap       Optional[string]   `json:"periodCap"`
	PeriodSeconds   Optional[int64]    `json:"periodSeconds"`
	ExpiresAt       Optional[string]   `json:"expiresAt"`
	Models          Optional[[]string] `json:"models"`
	RatePerMinute   Optional[int]      `json:"ratePerMinute"`
	TokensPerMinute Optional[int64]    `json:"tokensPerMinute"`
}

// change is the create request as a change of a key with no limits, so that
// creation and PATCH share one check (applyKey). A nil pointer is an absent
// member.
func (req KeyRequest) change() KeyChange {
	c := KeyChange{
		Name:            Optional[string]{Set: true, V: req.Name},
		Models:          Optional[[]string]{Set: true, V: req.Models},
		RatePerMinute:   Optional[int]{Set: true, V: req.RatePerMinute},
		TokensPerMinute: Optional[int64]{Set: true, V: req.TokensPerMinute},
	}
	if req.TotalCap != nil {
		c.TotalCap = Optional[string]{Set: true, V: *req.TotalCap}
	}
	if req.PeriodCap != nil {
		c.PeriodCap = Optional[string]{Set: true, V: *req.PeriodCap}
	}
	if req.PeriodSeconds != nil {
		c.PeriodSeconds = Optional[int64]{Set: true, V: *req.PeriodSeconds}
	}
	if req.ExpiresAt != nil {
		c.ExpiresAt = Optional[string]{Set: true, V: *req.ExpiresAt}
	}
	return c
}

// empty reports whether c changes nothing.
func (c KeyChange) empty() bool {
	return !c.Name.Set && !c.TotalCap.Set && !c.PeriodCap.Set && !c.PeriodSeconds.Set && !c.ExpiresAt.Set &&
		!c.Models.Set && !c.RatePerMinute.Set && !c.TokensPerMinute.Set
}

// applyKey checks c and applies it to k: the one check of a key's fields,
// for creation and for PATCH. On error k may be partly changed.
func (h *Handler) applyKey(k *store.APIKey, c KeyChange) error {
	if c.Name.Set {
		if len(c.Name.V) > store.MaxKeyName || !printableASCII(c.Name.V) {
			return badRequest("invalid_name", fmt.Sprintf("name must be up to %d printable ASCII characters", store.MaxKeyName))
		}
		k.Name = c.Name.V // "" when null
	}
	var err error
	switch {
	case !c.TotalCap.Set:
	case c.TotalCap.Null:
		k.TotalCap = store.NoCap
	default:
		if k.TotalCap, err = parseAmount(c.TotalCap.V); err != nil {
			return badRequest("invalid_total_cap", "totalCap "+err.Error())
		}
	}
	switch {
	case c.PeriodCap.Set != c.PeriodSeconds.Set || c.PeriodCap.Null != c.PeriodSeconds.Null:
		return badRequest("invalid_period_cap", "periodCap and periodSeconds go together")
	case !c.PeriodCap.Set:
	case c.PeriodCap.Null:
		k.PeriodCap, k.Period = store.NoCap, 0
	default:
		if k.PeriodCap, err = parseAmount(c.PeriodCap.V); err != nil {
			return badRequest("invalid_period_cap", "periodCap "+err.Error())
		}
		p := c.PeriodSeconds.V
		if p <= 0 || p > int64(store.MaxKeyPeriod/time.Second) {
			return badRequest("invalid_period_cap", fmt.Sprintf("periodSeconds must be 1..%d", int64(store.MaxKeyPeriod/time.Second)))
		}
		k.Period = time.Duration(p) * time.Second
	}
	switch {
	case !c.ExpiresAt.Set:
	case c.ExpiresAt.Null:
		k.ExpiresAt = time.Time{}
	default:
		t, err := parseTime(c.ExpiresAt.V)
		now := h.Now()
		if err != nil || !t.After(now) || t.Sub(now) > maxKeyLifetime {
			return badRequest("invalid_expires_at", "expiresAt must be an RFC 3339 time in the future, within 10 years")
		}
		k.ExpiresAt = t.UTC().Truncate(time.Millisecond)
	}
	if c.RatePerMinute.Set {
		if r := c.RatePerMinute.V; r < 0 || r > maxRatePerMinute {
			return badRequest("invalid_rate_limit", fmt.Sprintf("ratePerMinute must be 0 (none) to %d", maxRatePerMinute))
		}
		k.RatePerMinute = c.RatePerMinute.V // 0 when null
	}
	if c.TokensPerMinute.Set {
		if r := c.TokensPerMinute.V; r < 0 || r > maxTokensPerMinute {
			return badRequest("invalid_rate_limit", fmt.Sprintf("tokensPerMinute must be 0 (none) to %d", int64(maxTokensPerMinute)))
		}
		k.TokensPerMinute = c.TokensPerMinute.V
	}
	if c.Models.Set {
		models := c.Models.V // nil when null
		if len(models) > store.MaxKeyModels {
			return badRequest("invalid_models", fmt.Sprintf("at most %d models", store.MaxKeyModels))
		}
		for _, m := range models {
			if !store.ValidID(m) {
				return badRequest("invalid_models", "a model name is empty, too long or has spaces or control characters")
			}
		}
		k.Models = nil
		if len(models) > 0 {
			k.Models = slices.Compact(slices.Sorted(slices.Values(models)))
		}
	}
	return nil
}

type keyList struct {
	Object string    `json:"object"`
	Data   []keyView `json:"data"`
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) error {
	owner, err := h.session(r)
	if err != nil {
		return err
	}
	keys, err := h.st.KeysByOwner(r.Context(), owner)
	if err != nil {
		return err
	}
	out := keyList{Object: "list", Data: make([]keyView, 0, len(keys))}
	for _, k := range keys {
		out.Data = append(out.Data, viewOf(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, id string) error {
	owner, err := h.session(r)
	if err != nil {
		return err
	}
	k, err := h.RevokeKey(r.Context(), owner, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOf(k))
	return nil
}

// RevokeKey revokes owner's key id. Another account's key, like a key that
// does not exist, is a 404 *RequestError: an account cannot tell the two
// apart.
func (h *Handler) RevokeKey(ctx context.Context, owner, id string) (store.APIKey, error) {
	if !store.ValidID(id) {
		return store.APIKey{}, badRequest("invalid_key_id", "not a key id")
	}
	k, err := h.st.RevokeKey(ctx, owner, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.APIKey{}, errKeyNotFound
	case err != nil:
		return store.APIKey{}, err
	}
	h.keyChanged(k.Hash)
	h.log.InfoContext(ctx, "revoked API key", "account", owner, "key_id", id)
	return k, nil
}

// Keys returns owner's keys, revoked ones too.
func (h *Handler) Keys(ctx context.Context, owner string) ([]store.APIKey, error) {
	return h.st.KeysByOwner(ctx, owner)
}

var errKeyNotFound = &RequestError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "key_not_found", Message: "this account has no key with this id"}

// updateKey changes the limits of the owner's key (KeyChange says how).
//
// A lowered cap or rate binds on every replica at the key's next call, with
// no message between replicas: each call reads its key from the store, a
// replica's credit lease is retired when its limits differ from the key's
// (ledger.Leases, usable) and a rate slice is dropped when the key's limit
// changed (rates.go). Two changes racing for one key both apply: the store
// writes a change only over the key it was made to (a compare-and-set), and
// the loser reads the key again and applies its change to that.
// maxUpdateAttempts bounds how often a key change is applied again to a key
// that changed under it.
const maxUpdateAttempts = 5

func (h *Handler) updateKey(w http.ResponseWriter, r *http.Request, id string) error {
	owner, err := h.session(r)
	if err != nil {
		return err
	}
	if !store.ValidID(id) {
		return badRequest("invalid_key_id", "not a key id")
	}
	b, err := readBody(w, r, maxKeyBody, true)
	if err != nil {
		return err
	}
	var c KeyChange
	if err := decodeStrict(b, &c); err != nil {
		return err
	}
	k, err := h.ChangeKey(r.Context(), owner, id, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOf(k))
	return nil
}

// ChangeKey applies c to owner's key id (see updateKey) and returns the key
// as stored. A refusal is a *RequestError whose message is safe to show.
func (h *Handler) ChangeKey(ctx context.Context, owner, id string, c KeyChange) (store.APIKey, error) {
	if !store.ValidID(id) {
		return store.APIKey{}, badRequest("invalid_key_id", "not a key id")
	}
	if c.empty() {
		return store.APIKey{}, badRequest("nothing_to_change", "the body names no field to change")
	}
	revoked := &RequestError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "key_revoked", Message: "this key is revoked: its limits can no longer change"}
	var k store.APIKey
	// The change applies to the key as it is when written: a change that
	// raced it in is read again and kept, not overwritten.
	for attempt := 0; ; attempt++ {
		keys, err := h.st.KeysByOwner(ctx, owner)
		if err != nil {
			return store.APIKey{}, err
		}
		i := slices.IndexFunc(keys, func(k store.APIKey) bool { return k.ID == id })
		switch {
		case i < 0:
			return store.APIKey{}, errKeyNotFound
		case keys[i].Revoked():
			return store.APIKey{}, revoked
		}
		from := keys[i]
		k = from
		if err := h.applyKey(&k, c); err != nil {
			return store.APIKey{}, err
		}
		k, err = h.st.UpdateKey(ctx, owner, id, from, k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return store.APIKey{}, errKeyNotFound
		case errors.Is(err, store.ErrConflict) && attempt < maxUpdateAttempts-1:
			continue // revoked or changed since it was read: read it again
		case errors.Is(err, store.ErrConflict):
			return store.APIKey{}, &RequestError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "key_busy",
				Message: "this key kept changing while this change was applied; nothing was changed, retry"}
		case err != nil:
			return store.APIKey{}, err
		}
		break
	}
	h.keyChanged(k.Hash)
	h.log.InfoContext(ctx, "updated API key", "account", owner, "key_id", id)
	return k, nil
}

func (h *Handler) keyChanged(hash string) {
	if h.KeyChanged != nil {
		h.KeyChanged(hash)
	}
}

// readBody reads r's body, at most limit bytes; with wantJSON the request
// must say Content-Type: application/json (which also makes a cross-site
// browser request need a CORS preflight).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, wantJSON bool) ([]byte, error) {
	if wantJSON {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return nil, &RequestError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
				Message: "Content-Type must be application/json"}
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, &RequestError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the body is over %d bytes", limit)}
		}
		return nil, badRequest("invalid_request", "the request body could not be read")
	}
	return b, nil
}

// decodeStrict decodes one JSON object into v: no unknown or duplicate
// members (at any depth), nothing after it, no invalid UTF-8.
func decodeStrict(b []byte, v any) error {
	bad := badRequest("invalid_json", "the body is not a JSON object of the expected fields, each once")
	if !json.Valid(b) || !validUTF8(b) || dupKeys(b) {
		return bad
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad
	}
	if bytes.TrimSpace(b)[0] != '{' {
		return bad
	}
	return nil
}

func validUTF8(b []byte) bool { return strings.ToValidUTF8(string(b), "\ufffd") == string(b) }

// dupKeys reports whether any JSON object in b (valid JSON) has a member
// twice: encoding/json would silently keep the last one.
func dupKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dup, err := dupValue(dec)
	return dup || err != nil
}

func dupValue(dec *json.Decoder) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return false, err
			}
			key, _ := k.(string)
			if seen[key] {
				return true, nil
			}
			seen[key] = true
			if dup, err := dupValue(dec); dup || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token() // '}'
		return false, err
	case json.Delim('['):
		for dec.More() {
			if dup, err := dupValue(dec); dup || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token() // ']'
		return false, err
	}
	return false, nil
}

// parseAmount parses a canonical decimal amount of atomic units, 0 to
// store.MaxAmount.
func parseAmount(s string) (int64, error) {
	if s == "" || len(s) > 16 || (s[0] == '0' && len(s) > 1) || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("must be a decimal string of atomic units, 0 to %d", store.MaxAmount)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > store.MaxAmount {
		return 0, fmt.Errorf("must be a decimal string of atomic units, 0 to %d", store.MaxAmount)
	}
	return n, nil
}

// decodeSignature decodes 0x-prefixed hex of 1 to maxSignatureBytes bytes.
// It does not insist on an externally owned account's 65 bytes: a contract
// wallet's signature (EIP-1271) may be any length, and SignIn judges it.
func decodeSignature(s string) ([]byte, bool) {
	if len(s) < 4 || len(s) > 2+2*maxSignatureBytes || !strings.HasPrefix(s, "0x") {
		return nil, false
	}
	b, err := hex.DecodeString(s[2:])
	return b, err == nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := x402.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b) // #nosec G705 -- a JSON body sent as application/json with nosniff, not HTML
}
