package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// WellKnownPath is where a gateway publishes its receipt signer and domain
// (DECISIONS D18).
const WellKnownPath = "/.well-known/llm4agents.json"

// maxWellKnown bounds the well-known document read.
const maxWellKnown = 64 << 10

// ErrBadWellKnown: the well-known document could not be fetched or does not
// decode strictly.
var ErrBadWellKnown = errors.New("client: bad " + WellKnownPath)

// WellKnown is the document at WellKnownPath:
//
//	{"receipts": {"signer": "0x…", "domain": {"name": "llm4agents", "version": "1", "chainId": 8453}}}
//
// The receipts object is decoded strictly: exactly these fields, once each,
// a signer address (EIP-55 if mixed case), a non-empty name and version, and
// chainId a positive integer JSON number. Other top-level members are allowed
// and ignored, so the document can grow without breaking buyers.
type WellKnown struct {
	Receipts WellKnownReceipts `json:"receipts"`
}

// WellKnownReceipts says who signs the receipts and in which EIP-712 domain.
type WellKnownReceipts struct {
	Signer common.Address `json:"signer"`
	Domain ReceiptDomain  `json:"domain"`
}

// MarshalJSON encodes the signer with its EIP-55 checksum.
func (w WellKnownReceipts) MarshalJSON() ([]byte, error) {
	type domain ReceiptDomain
	return json.Marshal(struct {
		Signer string `json:"signer"`
		Domain domain `json:"domain"`
	}{w.Signer.Hex(), domain(w.Domain)})
}

// UnmarshalJSON decodes strictly, as ParseWellKnown.
func (w *WellKnown) UnmarshalJSON(b []byte) error {
	p, err := ParseWellKnown(b)
	if err != nil {
		return err
	}
	*w = *p
	return nil
}

// ParseWellKnown decodes a well-known document strictly (see WellKnown).
func ParseWellKnown(b []byte) (*WellKnown, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadWellKnown, fmt.Sprintf(format, args...))
	}
	if err := strictJSON(b); err != nil {
		return nil, bad("%v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || top == nil {
		return nil, bad("not a JSON object")
	}
	rawReceipts, ok := top["receipts"]
	if !ok {
		return nil, bad("no receipts member")
	}
	var w struct {
		Signer *string `json:"signer"`
		Domain *struct {
			Name    *string         `json:"name"`
			Version *string         `json:"version"`
			ChainID json.RawMessage `json:"chainId"`
		} `json:"domain"`
	}
	dec := json.NewDecoder(bytes.NewReader(rawReceipts))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, bad("receipts is not {signer, domain{name, version, chainId}}")
	}
	if w.Signer == nil || w.Domain == nil || w.Domain.Name == nil || w.Domain.Version == nil || w.Domain.ChainID == nil {
		return nil, bad("receipts lacks signer, domain.name, domain.version or domain.chainId")
	}
	signer, err := exact.ParseAddress(*w.Signer)
	if err != nil {
		return nil, bad("signer: %v", err)
	}
	if signer == (common.Address{}) {
		return nil, bad("signer is the zero address")
	}
	if *w.Domain.Name == "" || *w.Domain.Version == "" {
		return nil, bad("domain name and version must not be empty")
	}
	// A JSON number in canonical decimal: not a string, fraction or exponent.
	chainID, err := exact.ParseUint256(string(w.Domain.ChainID))
	if err != nil || chainID.Sign() == 0 {
		return nil, bad("domain.chainId is not a positive integer")
	}
	return &WellKnown{Receipts: WellKnownReceipts{
		Signer: signer,
		Domain: ReceiptDomain{Name: *w.Domain.Name, Version: *w.Domain.Version, ChainID: chainID},
	}}, nil
}

// FetchWellKnown fetches and parses origin's well-known document with hc (nil
// means http.DefaultClient). origin is scheme://host[:port]; anything after it
// is ignored. The body read is bounded and the answer must be a 200.
func FetchWellKnown(ctx context.Context, hc *http.Client, origin string) (*WellKnown, error) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: origin %q is not http(s)://host", ErrBadWellKnown, redactOrigin(origin))
	}
	target := u.Scheme + "://" + u.Host + WellKnownPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadWellKnown, err)
	}
	req.Header.Set("Accept", "application/json")
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %w", ErrBadWellKnown, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: status %d", ErrBadWellKnown, target, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxWellKnown+1))
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %w", ErrBadWellKnown, target, err)
	}
	if len(b) > maxWellKnown {
		return nil, fmt.Errorf("%w: GET %s: body over %d bytes", ErrBadWellKnown, target, maxWellKnown)
	}
	return ParseWellKnown(b)
}

// redactOrigin keeps what an error may show of a string meant as an origin.
func redactOrigin(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Scheme + "://" + u.Host
	}
	return "(unparsable)"
}

// ReceiptVerifier verifies the receipts of responses against the signer and
// domain their origin publishes at WellKnownPath. It caches each origin's
// document, and fetches it again once when a receipt does not verify, so a
// rotated signer key is picked up. The zero value uses http.DefaultClient and
// is safe for concurrent use.
type ReceiptVerifier struct {
	// Client fetches the well-known documents; nil means http.DefaultClient.
	// It need not be the paying client: the document is free.
	Client *http.Client

	mu    sync.Mutex
	known map[string]*WellKnown // by origin
}

// VerifyResponse verifies the receipt in resp's HeaderReceipt against the
// well-known document of the origin resp.Request was sent to, and returns the
// receipt. A response without the header is ErrNoReceipt.
func (v *ReceiptVerifier) VerifyResponse(ctx context.Context, resp *http.Response) (*Receipt, error) {
	r, sig, err := DecodeReceiptHeader(resp.Header.Get(HeaderReceipt))
	if err != nil {
		return nil, err
	}
	if resp.Request == nil || resp.Request.URL == nil {
		return nil, errors.New("client: response has no request to tell its origin")
	}
	if err := v.Verify(ctx, originOf(resp.Request.URL), r, sig); err != nil {
		return nil, err
	}
	return r, nil
}

// Verify checks that sig over r was made by the signer origin publishes, in
// the domain it publishes.
func (v *ReceiptVerifier) Verify(ctx context.Context, origin string, r *Receipt, sig []byte) error {
	_, err := v.VerifySigner(ctx, origin, r, sig)
	return err
}

// VerifySigner is Verify that also returns the published signer the
// receipt was verified against, for a person to compare.
func (v *ReceiptVerifier) VerifySigner(ctx context.Context, origin string, r *Receipt, sig []byte) (common.Address, error) {
	for refresh := false; ; refresh = true {
		wk, cached, err := v.wellKnown(ctx, origin, refresh)
		if err != nil {
			return common.Address{}, err
		}
		got, err := VerifyReceipt(r, sig, wk.Receipts.Domain)
		switch {
		case err == nil && got == wk.Receipts.Signer:
			return got, nil
		case cached:
			continue // the signer may have rotated: look again, once
		case err != nil:
			return common.Address{}, err
		default:
			return common.Address{}, fmt.Errorf("%w: signed by %s, not by %s's published signer %s", ErrReceiptSignature, got.Hex(), origin, wk.Receipts.Signer.Hex())
		}
	}
}

// OriginOf returns scheme://host[:port] of u, lower-cased: the origin whose
// well-known document vouches for receipts of responses from u.
func OriginOf(u *url.URL) string { return originOf(u) }

// wellKnown returns origin's document, from the cache unless refresh is set,
// and whether it came from the cache.
func (v *ReceiptVerifier) wellKnown(ctx context.Context, origin string, refresh bool) (*WellKnown, bool, error) {
	v.mu.Lock()
	wk, ok := v.known[origin]
	v.mu.Unlock()
	if ok && !refresh {
		return wk, true, nil
	}
	wk, err := FetchWellKnown(ctx, v.Client, origin)
	if err != nil {
		return nil, false, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.known == nil {
		v.known = map[string]*WellKnown{}
	}
	v.known[origin] = wk
	return wk, false, nil
}

// originOf is scheme://host[:port] of u, lower-cased.
func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}
