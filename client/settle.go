package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
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

// ErrSettledAmount is wrapped by SettledAmount, and so in Charge.Err, when the
// PAYMENT-RESPONSE of a successful upto payment reports an amount that is not
// a uint256 or is above the maximum authorized: the server claims something
// the permit cannot have paid. The maximum is counted instead.
var ErrSettledAmount = errors.New("client: PAYMENT-RESPONSE amount is not within the authorized maximum")

// maxQuoted bounds how much of a server's amount an error repeats.
const maxQuoted = 40

// SettledAmount returns what a paid payment of req cost, as the server's
// PAYMENT-RESPONSE sr (nil when there was none) reports it, and as a
// Transport counts it against the budget.
//
// An exact payment costs req.Amount, whatever sr says. An upto payment costs
// the amount sr reports when sr is a success naming a uint256 at most
// req.Amount (the maximum the permit authorized); otherwise it is counted at
// the maximum: a success that names no amount could have charged up to it. An
// amount that is not a uint256, or is above the maximum, also returns an
// error wrapping ErrSettledAmount, with the maximum. An error without an
// amount means req.Amount itself is not one.
func SettledAmount(req x402.PaymentRequirements, sr *x402.SettleResponse) (*big.Int, error) {
	maximum, err := exact.ParseUint256(req.Amount)
	if err != nil {
		return nil, fmt.Errorf("client: amount of the option paid: %w", err)
	}
	if req.Scheme != upto.Scheme || sr == nil || !sr.Success || sr.Amount == "" {
		return maximum, nil
	}
	actual, err := exact.ParseUint256(sr.Amount)
	if err != nil {
		return maximum, fmt.Errorf("%w: %.*q is not an amount; counting the maximum %s", ErrSettledAmount, maxQuoted, sr.Amount, maximum)
	}
	if actual.Cmp(maximum) > 0 {
		return maximum, fmt.Errorf("%w: %s is above the maximum %s; counting the maximum", ErrSettledAmount, actual, maximum)
	}
	return actual, nil
}

// Charge is what a Transport concluded about one payment it sent, reported
// to Transport.OnCharge when the RoundTrip that sent it returns.
type Charge struct {
	// Requirements is the option paid, as the 402 offered it; for upto its
	// Amount is the maximum.
	Requirements x402.PaymentRequirements
	// Maximum is what the payment authorized: Requirements.Amount.
	Maximum *big.Int
	// Amount is what was counted as spent: the settled amount of an upto
	// payment (SettledAmount), the Maximum otherwise. It is nil unless Outcome
	// is OutcomePaid; an unknown outcome keeps the Maximum held.
	Amount *big.Int
	// Outcome is what the last answer said about the payment.
	Outcome Outcome
	// Settle is the last answer's PAYMENT-RESPONSE, nil when it had none or
	// it did not decode.
	Settle *x402.SettleResponse
	// Err is why the PAYMENT-RESPONSE could not be taken at its word: an
	// ErrSettledAmount, or the decoder's error. Nil otherwise.
	Err error
}

// streamedUpto reports whether a paid upto answer is a stream whose
// settlement named no amount: a seller that delivers a stream first and
// settles it after (llm4agents' deliver_then_settle) names the charge in the
// stream's last chunk instead (x_llm4agents.charged).
func streamedUpto(c *call, resp *http.Response, ch Charge) bool {
	return ch.Outcome == OutcomePaid && resp != nil && resp.Body != nil &&
		c.e.Requirements.Scheme == upto.Scheme && ch.Maximum != nil &&
		(ch.Settle == nil || ch.Settle.Amount == "") &&
		strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

// maxChargeLine bounds the SSE line chargeReader keeps while looking for the
// charge: a usage chunk is a few hundred bytes.
const maxChargeLine = 64 << 10

// chargeReader passes a streamed upto answer through and reads, in passing,
// the charge its last chunk names (x_llm4agents.charged). When the body ends
// or is closed, done learns the charge: the one named, if it is a whole
// number no larger than the maximum; the maximum otherwise (with an error
// when one was named but cannot be right). Until then the maximum stays held.
type chargeReader struct {
	io.ReadCloser
	maximum *big.Int
	done    func(charged *big.Int, err error)

	line    []byte
	charged string
	named   bool
	once    sync.Once
}

func (r *chargeReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.scan(p[:n])
	if err != nil {
		r.finish()
	}
	return n, err
}

func (r *chargeReader) Close() error {
	r.finish()
	return r.ReadCloser.Close()
}

// scan looks at whole lines for a data event carrying x_llm4agents.
func (r *chargeReader) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(r.line)+len(b) <= maxChargeLine {
				r.line = append(r.line, b...)
			} else {
				r.line = r.line[:0]
			}
			return
		}
		if len(r.line)+i <= maxChargeLine {
			r.line = append(r.line, b[:i]...)
			r.take(r.line)
		}
		r.line = r.line[:0]
		b = b[i+1:]
	}
}

func (r *chargeReader) take(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: "))
	if !ok || !bytes.Contains(data, []byte(`"x_llm4agents"`)) {
		return
	}
	var ev struct {
		X *struct {
			Charged string `json:"charged"`
		} `json:"x_llm4agents"`
	}
	if json.Unmarshal(data, &ev) == nil && ev.X != nil && ev.X.Charged != "" {
		r.charged, r.named = ev.X.Charged, true
	}
}

func (r *chargeReader) finish() {
	r.once.Do(func() {
		if !r.named {
			r.done(new(big.Int).Set(r.maximum), nil)
			return
		}
		v, err := exact.ParseUint256(r.charged)
		if err != nil || v.Cmp(r.maximum) > 0 {
			r.done(new(big.Int).Set(r.maximum), fmt.Errorf("%w: the stream's charge %q is not a whole amount up to the maximum %s", ErrSettledAmount, r.charged, r.maximum))
			return
		}
		r.done(v, nil)
	})
}
