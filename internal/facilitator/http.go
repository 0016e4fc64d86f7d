package facilitator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/x402"
)

// maxRequestBytes caps a /verify or /settle body. A real one is about 2 KiB.
const maxRequestBytes = 64 << 10

// API is what a Handler serves: the three operations of an x402 facilitator.
// *Facilitator and *Client implement it, and so may a wrapper around either.
// Protocol failures are answers (isValid or success false, with a Reason); an
// error means no verdict was reached (a node that is down, a cancelled
// context).
type API interface {
	Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.VerifyResponse, error)
	Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error)
	Supported(ctx context.Context) (*x402.SupportedResponse, error)
}

// Handler serves a Facilitator over HTTP as the official HTTPFacilitatorClient
// expects: POST /verify, POST /settle, GET /supported. A well-formed request always
// gets 200 with a JSON answer, valid or not; a malformed one gets 400
// {"error": "..."}.
type Handler struct {
	f   API
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the HTTP face of f.
func NewHandler(f API, log *slog.Logger) *Handler {
	h := &Handler{f: f, log: log.With("component", "facilitator-http"), mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /verify", h.verify)
	h.mux.HandleFunc("POST /settle", h.settle)
	h.mux.HandleFunc("GET /supported", h.supported)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// readRequest decodes a /verify or /settle body strictly enough that nothing
// malformed reaches the facilitator.
func readRequest(r *http.Request) (*x402.FacilitatorRequest, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	var raw struct {
		X402Version         json.RawMessage `json:"x402Version"`
		PaymentPayload      json.RawMessage `json:"paymentPayload"`
		PaymentRequirements json.RawMessage `json:"paymentRequirements"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("body is not a JSON object: %w", err)
	}
	if len(raw.X402Version) > 0 && string(raw.X402Version) != "2" {
		return nil, x402.ErrVersion
	}
	if len(raw.PaymentPayload) == 0 || len(raw.PaymentRequirements) == 0 {
		return nil, errors.New("paymentPayload and paymentRequirements are required")
	}
	p, err := x402.ParsePaymentPayload(raw.PaymentPayload)
	if err != nil {
		return nil, fmt.Errorf("paymentPayload: %w", err)
	}
	var req x402.PaymentRequirements
	if err := json.Unmarshal(raw.PaymentRequirements, &req); err != nil {
		return nil, fmt.Errorf("paymentRequirements: %w", err)
	}
	if req.Scheme == "" || req.Network == "" {
		return nil, errors.New("paymentRequirements needs scheme and network")
	}
	return &x402.FacilitatorRequest{X402Version: x402.Version, PaymentPayload: *p, PaymentRequirements: req}, nil
}

func (h *Handler) verify(w http.ResponseWriter, r *http.Request) {
	req, err := readRequest(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	resp, err := h.f.Verify(r.Context(), &req.PaymentPayload, req.PaymentRequirements)
	if err != nil {
		h.log.Error("verify", "err", err)
		resp = &x402.VerifyResponse{IsValid: false, InvalidReason: x402.ReasonUnexpectedVerifyError, InvalidMessage: "facilitator could not reach a verdict"}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) settle(w http.ResponseWriter, r *http.Request) {
	req, err := readRequest(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	resp, err := h.f.Settle(r.Context(), &req.PaymentPayload, req.PaymentRequirements)
	if err != nil {
		h.log.Error("settle", "err", err)
		resp = &x402.SettleResponse{
			Success: false, ErrorReason: x402.ReasonUnexpectedSettleError, ErrorMessage: "facilitator could not reach a verdict",
			Transaction: "", Network: req.PaymentRequirements.Network,
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) supported(w http.ResponseWriter, r *http.Request) {
	resp, err := h.f.Supported(r.Context())
	if err != nil {
		h.log.Error("supported", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := x402.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Client calls a remote facilitator over HTTP; it implements API, and the
// gateway's Facilitator.
type Client struct {
	base string
	http *http.Client
}

// DefaultClientTimeout bounds one call to a remote facilitator; settle waits for a
// block, so it is generous.
const DefaultClientTimeout = 60 * time.Second

// NewClient returns a client of the facilitator at baseURL. A nil hc uses a client
// with DefaultClientTimeout.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: DefaultClientTimeout}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: hc}
}

// Verify calls POST /verify.
func (c *Client) Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.VerifyResponse, error) {
	var resp x402.VerifyResponse
	if err := c.post(ctx, "/verify", p, req, &resp, "isValid"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Settle calls POST /settle.
func (c *Client) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	var resp x402.SettleResponse
	if err := c.post(ctx, "/settle", p, req, &resp, "success"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Supported calls GET /supported.
func (c *Client) Supported(ctx context.Context) (*x402.SupportedResponse, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/supported", nil) // #nosec G704 -- c.base is the operator-configured facilitator URL
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(r) // #nosec G704 -- r targets the operator-configured facilitator URL
	if err != nil {
		return nil, fmt.Errorf("facilitator supported: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBytes))
	if err != nil {
		return nil, fmt.Errorf("facilitator supported: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("facilitator supported: status %d", resp.StatusCode)
	}
	var out x402.SupportedResponse
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("facilitator supported: %w", err)
	}
	return &out, nil
}

// post sends a facilitator request and decodes the answer. Like the official
// client it accepts a non-200 answer only when it carries the verdict field.
func (c *Client) post(ctx context.Context, path string, p *x402.PaymentPayload, req x402.PaymentRequirements, out any, verdict string) error {
	body, err := x402.Marshal(x402.FacilitatorRequest{X402Version: x402.Version, PaymentPayload: *p, PaymentRequirements: req})
	if err != nil {
		return fmt.Errorf("facilitator %s: encode: %w", path, err)
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body)) // #nosec G704 -- c.base is the operator-configured facilitator URL
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(r) // #nosec G704 -- r targets the operator-configured facilitator URL
	if err != nil {
		return fmt.Errorf("facilitator %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBytes))
	if err != nil {
		return fmt.Errorf("facilitator %s: %w", path, err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return fmt.Errorf("facilitator %s: status %d, answer is not JSON", path, resp.StatusCode)
	}
	if _, ok := probe[verdict]; !ok {
		return fmt.Errorf("facilitator %s: status %d, answer lacks %q", path, resp.StatusCode, verdict)
	}
	if path == "/settle" {
		if _, ok := probe["transaction"]; !ok {
			return fmt.Errorf("facilitator %s: answer lacks transaction", path)
		}
		if _, ok := probe["network"]; !ok {
			return fmt.Errorf("facilitator %s: answer lacks network", path)
		}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("facilitator %s: %w", path, err)
	}
	return nil
}

var (
	_ http.Handler = (*Handler)(nil)
	_ API          = (*Client)(nil)
	_ API          = (*Facilitator)(nil)
)
