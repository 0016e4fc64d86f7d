package client

import (
	"errors"
	"net/http"

	"github.com/llm4agents/llm4agents/x402"
)

// ErrNoSettleResponse is returned by SettleResponse for a response without a
// PAYMENT-RESPONSE header.
var ErrNoSettleResponse = errors.New("client: response has no PAYMENT-RESPONSE header")

// SettleResponse decodes the PAYMENT-RESPONSE header of resp: the server's
// account of the settlement of the payment sent with the request. A response the
// Transport did not pay has none (ErrNoSettleResponse); a header that does not
// decode yields the decoder's error (x402.ErrHeaderJSON, x402.ErrHeaderBase64, ...),
// and the response itself is still usable.
func SettleResponse(resp *http.Response) (*x402.SettleResponse, error) {
	v := resp.Header.Get(x402.HeaderPaymentResponse)
	if v == "" {
		return nil, ErrNoSettleResponse
	}
	return x402.DecodeSettleResponse(v)
}

// outcomeOf reads what the answer to a paid request says about the payment. A
// 2xx counts as paid whatever its PAYMENT-RESPONSE says, since the server served
// the paid resource; settlement_pending is unknown, and so is a
// 409, which says the payment is in use by another request, pending, or already
// spent; anything else without a successful PAYMENT-RESPONSE was not paid.
func outcomeOf(resp *http.Response) (Outcome, *x402.SettleResponse, error) {
	sr, err := SettleResponse(resp)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return OutcomePaid, sr, err
	case err == nil && sr.Success:
		return OutcomePaid, sr, nil
	case resp.StatusCode == http.StatusConflict:
		return OutcomeUnknown, sr, err
	case err != nil:
		return OutcomeNotPaid, nil, err
	case sr.ErrorReason == x402.ReasonSettlementPending:
		return OutcomeUnknown, sr, nil
	default:
		return OutcomeNotPaid, sr, nil
	}
}
