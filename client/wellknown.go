package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402/receipt"
)

// maxWellKnown bounds the well-known document read.
const maxWellKnown = 64 << 10

// FetchWellKnown fetches and parses origin's well-known document with hc (nil
// means http.DefaultClient). origin is scheme://host[:port]; anything after it
// is ignored. The body read is bounded and the answer must be a 200.
func FetchWellKnown(ctx context.Context, hc *http.Client, origin string) (*receipt.WellKnown, error) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: origin %q is not http(s)://host", receipt.ErrBadWellKnown, redactOrigin(origin))
	}
	target := u.Scheme + "://" + u.Host + receipt.WellKnownPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", receipt.ErrBadWellKnown, err)
	}
	req.Header.Set("Accept", "application/json")
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %w", receipt.ErrBadWellKnown, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: status %d", receipt.ErrBadWellKnown, target, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxWellKnown+1))
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %w", receipt.ErrBadWellKnown, target, err)
	}
	if len(b) > maxWellKnown {
		return nil, fmt.Errorf("%w: GET %s: body over %d bytes", receipt.ErrBadWellKnown, target, maxWellKnown)
	}
	return receipt.ParseWellKnown(b)
}

// redactOrigin keeps what an error may show of a string meant as an origin.
func redactOrigin(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Scheme + "://" + u.Host
	}
	return "(unparsable)"
}

// ReceiptVerifier verifies the receipts of responses against the signer and
// domain their origin publishes at receipt.WellKnownPath. It caches each origin's
// document, and fetches it again once when a receipt does not verify, so a
// rotated signer key is picked up. The zero value uses http.DefaultClient and
// is safe for concurrent use.
type ReceiptVerifier struct {
	// Client fetches the well-known documents; nil means http.DefaultClient.
	// It need not be the paying client: the document is free.
	Client *http.Client

	mu    sync.Mutex
	known map[string]*receipt.WellKnown // by origin
}

// VerifyResponse verifies the receipt in resp's receipt.Header against the
// well-known document of the origin resp.Request was sent to, and returns the
// receipt. A response without the header is receipt.ErrMissing.
func (v *ReceiptVerifier) VerifyResponse(ctx context.Context, resp *http.Response) (*receipt.Receipt, error) {
	r, sig, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
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
func (v *ReceiptVerifier) Verify(ctx context.Context, origin string, r *receipt.Receipt, sig []byte) error {
	_, err := v.VerifySigner(ctx, origin, r, sig)
	return err
}

// VerifySigner is Verify that also returns the published signer the
// receipt was verified against, for a person to compare.
func (v *ReceiptVerifier) VerifySigner(ctx context.Context, origin string, r *receipt.Receipt, sig []byte) (common.Address, error) {
	for refresh := false; ; refresh = true {
		wk, cached, err := v.wellKnown(ctx, origin, refresh)
		if err != nil {
			return common.Address{}, err
		}
		got, err := receipt.Verify(r, sig, wk.Receipts.Domain)
		switch {
		case err == nil && got == wk.Receipts.Signer:
			return got, nil
		case cached:
			continue // the signer may have rotated: look again, once
		case err != nil:
			return common.Address{}, err
		default:
			return common.Address{}, fmt.Errorf("%w: signed by %s, not by %s's published signer %s", receipt.ErrSignature, got.Hex(), origin, wk.Receipts.Signer.Hex())
		}
	}
}

// OriginOf returns scheme://host[:port] of u, lower-cased: the origin whose
// well-known document vouches for receipts of responses from u.
func OriginOf(u *url.URL) string { return originOf(u) }

// wellKnown returns origin's document, from the cache unless refresh is set,
// and whether it came from the cache.
func (v *ReceiptVerifier) wellKnown(ctx context.Context, origin string, refresh bool) (*receipt.WellKnown, bool, error) {
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
		v.known = map[string]*receipt.WellKnown{}
	}
	v.known[origin] = wk
	return wk, false, nil
}

// originOf is scheme://host[:port] of u, lower-cased.
func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}
