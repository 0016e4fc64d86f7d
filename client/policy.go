package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Policy says what a Transport may pay. Its zero value pays nothing: a payment
// needs its (network, asset) in Assets, an amount at most MaxPerRequest and at
// most what is left of Budget, and, when Balances is set, at most what the
// payer holds.
//
// An upto option counts its maximum (the requirement's amount) against
// MaxPerRequest and Budget; once the server settles, only the amount its
// PAYMENT-RESPONSE reports stays spent (see SettledAmount).
//
// Amounts are atomic units of the asset (10000 is 0.01 of a 6-decimal USDC).
// MaxPerRequest and Budget apply to every listed asset alike, so list assets of
// one denomination (USDC on several chains, say) or use one Transport per
// denomination. A Policy must not be changed once its Transport is in use.
type Policy struct {
	// MaxPerRequest caps a single payment. Nil pays nothing.
	MaxPerRequest *big.Int
	// Budget caps the sum of all payments made through the Transport over its
	// lifetime, counting payments whose outcome is unknown. Nil pays nothing.
	Budget *big.Int
	// Assets lists the tokens that may be paid, each on one network. Empty pays
	// nothing.
	Assets []Asset
	// PayTo, when not empty, lists the only addresses that may be paid (in any
	// case); an option paying anyone else is refused with RefusedPayTo.
	PayTo []string
	// Origins, when not empty, lists the only origins (scheme://host[:port],
	// such as "https://api.example.com") whose 402s may be paid; a 402 from any
	// other origin has every option refused with RefusedOrigin.
	Origins []string
	// Upto says whether the upto scheme is paid and how it ranks beside
	// exact; the zero value, UptoPrefer, pays it and prefers it.
	Upto UptoMode
	// Balances, when set, is asked the payer's balance of an option's asset
	// before a call's first authorization is signed: an option whose amount
	// (an upto option's maximum) is over it is refused with RefusedBalance,
	// and the next option the Transport prefers is read in turn. Only
	// options the rest of the policy allows are read, one at a time, each
	// read bounded by a few seconds and nothing kept for the next call. A
	// balance it cannot read (an error, ErrBalanceUnknown for a network it
	// does not know) refuses nothing: the server refuses an unfunded payment
	// itself, and charges nothing. Nil reads no balance.
	Balances Balances
}

// UptoMode says whether a Transport pays the upto scheme (a Permit2 transfer
// of at most the offer's amount, of which the server charges what the call
// cost) and how it ranks it among the options a 402 offers.
type UptoMode int

const (
	// UptoPrefer, the zero value: pay upto, and choose an upto option over
	// any other the policy allows, since it charges only what the call cost
	// and never more than exact would.
	UptoPrefer UptoMode = iota
	// UptoAsOffered: pay upto like any other scheme, in the server's order.
	UptoAsOffered
	// UptoRefuse: never pay upto; its options are refused with RefusedUpto.
	UptoRefuse
)

// String names the mode as the CLI spells it.
func (m UptoMode) String() string {
	switch m {
	case UptoPrefer:
		return "prefer"
	case UptoAsOffered:
		return "as-offered"
	case UptoRefuse:
		return "refuse"
	default:
		return fmt.Sprintf("UptoMode(%d)", int(m))
	}
}

// Asset is a token on a network, as a requirement names them.
type Asset struct {
	// Network is the CAIP-2 id, such as "eip155:8453".
	Network string
	// Address is the token contract, in any case.
	Address string
}

// ErrInvalidPolicy is returned by RoundTrip, on a 402, when the Transport's
// Policy cannot allow any payment: a limit is missing or negative, or an asset
// is malformed. Responses other than 402 pass through regardless.
var ErrInvalidPolicy = errors.New("client: invalid policy")

// Scheme names this package recognises without ever paying them.
const (
	SchemeNeverminedERC4337        = "nvm:erc4337"
	SchemeNeverminedCardDelegation = "nvm:card-delegation"
)

// LabelNevermined is the label of an option whose scheme needs a Nevermined
// account; such an option is never paid.
const LabelNevermined = "requires a Nevermined account"

// RefusalError says why an option of a 402 was not paid. Callers branch on it; the
// Option's Label says the same for a person. Kinds are append-only.
type RefusalError string

// Refusals, in the order the checks run: the first failing check names the
// refusal.
const (
	// RefusedNevermined: a Nevermined scheme, recognised by name, never paid
	// automatically.
	RefusedNevermined RefusalError = "nevermined"
	// RefusedForeignScheme: a scheme this client does not know; never paid.
	RefusedForeignScheme RefusalError = "foreign_scheme"
	// RefusedPaymentFlow: extra.paymentFlow is unknown, or one the exact scheme
	// does not support, as @x402/fetch 2.27 filters them.
	RefusedPaymentFlow RefusalError = "payment_flow"
	// RefusedNetwork: not an eip155 chain, or a network the policy does not allow.
	RefusedNetwork RefusalError = "network"
	// RefusedAsset: a token the policy does not allow on that network.
	RefusedAsset RefusalError = "asset"
	// RefusedOffer: the requirement is malformed, or uses a variant of exact this
	// client does not sign (Permit2), or asks for an authorization valid longer
	// than exact.MaxSignedTimeout, or is an upto offer without a valid
	// extra.facilitatorAddress (the one facilitator its permit may name).
	RefusedOffer RefusalError = "offer"
	// RefusedPayTo: a recipient not in Policy.PayTo.
	RefusedPayTo RefusalError = "pay_to"
	// RefusedOrigin: the 402 came from an origin not in Policy.Origins.
	RefusedOrigin RefusalError = "origin"
	// RefusedOverMaximum: the amount is over Policy.MaxPerRequest.
	RefusedOverMaximum RefusalError = "over_maximum"
	// RefusedOverBudget: the amount is over what is left of Policy.Budget.
	RefusedOverBudget RefusalError = "over_budget"
	// RefusedOutstanding: an authorization signed earlier for the same logical
	// call is still valid and pays another option, or none that
	// the 402 offers now; paying this one could pay twice. It resolves itself
	// once that authorization is within Transport.ReuseMargin of its
	// validBefore.
	RefusedOutstanding RefusalError = "outstanding"
	// RefusedUpto: an upto option, and Policy.Upto is UptoRefuse.
	RefusedUpto RefusalError = "upto"
	// RefusedBalance: the payer's balance of the asset, as Policy.Balances
	// read it, is less than the amount (an upto option's maximum). Checked
	// after every other check, and only for an option that passed them.
	RefusedBalance RefusalError = "balance"
	// RefusedPermit2Allowance: an upto option whose maximum the payer's
	// ERC-20 allowance to Permit2, as Policy.Balances read it (when it is a
	// Permit2Allowances), does not cover: the server would refuse the
	// permit (permit2_allowance_required). Checked after the balance.
	RefusedPermit2Allowance RefusalError = "permit2_allowance"
)

// Option is one entry of a 402's accepts, with the verdict of the policy on it.
type Option struct {
	// Index is the entry's position in accepts.
	Index        int
	Requirements x402.PaymentRequirements
	// RefusalError is why the option was not paid, or "" for the one chosen.
	RefusalError RefusalError
	// Label says why for a person, such as "requires a Nevermined account".
	Label string
}

// String formats the option for a person: scheme, network, amount, asset and the
// label.
func (o Option) String() string {
	r := o.Requirements
	return fmt.Sprintf("[%d] %s on %s, %s of %s: %s", o.Index, r.Scheme, r.Network, r.Amount, r.Asset, o.Label)
}

// NoPayableOptionError is what RoundTrip returns when a 402 offers nothing the
// Transport may pay. Nothing was signed and nothing was sent. Find it with
// errors.As: an http.Client wraps it in a *url.Error.
type NoPayableOptionError struct {
	// Resource is the request's URL without query or user info.
	Resource string
	// Options are the 402's accepts in order, each refused.
	Options []Option
}

func (e *NoPayableOptionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: no payable option in the 402 from %s", e.Resource)
	for i, o := range e.Options {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(o.String())
	}
	return b.String()
}

// rules is a Policy parsed and checked.
type rules struct {
	max, budget *big.Int
	assets      map[string][]common.Address // network -> allowed tokens
	payTo       map[common.Address]bool     // nil: any recipient
	origins     map[string]bool             // nil: any origin
	upto        UptoMode
	balances    Balances // nil: balances are not read
	// unfunded holds the options of one 402 that the payer's balance was
	// read not to cover (Transport.reserveFunded); nil outside it.
	unfunded map[int]verdict
}

func (p *Policy) rules() (*rules, error) {
	switch {
	case p.MaxPerRequest == nil:
		return nil, fmt.Errorf("%w: MaxPerRequest is not set", ErrInvalidPolicy)
	case p.MaxPerRequest.Sign() < 0:
		return nil, fmt.Errorf("%w: MaxPerRequest is negative", ErrInvalidPolicy)
	case p.Budget == nil:
		return nil, fmt.Errorf("%w: Budget is not set", ErrInvalidPolicy)
	case p.Budget.Sign() < 0:
		return nil, fmt.Errorf("%w: Budget is negative", ErrInvalidPolicy)
	case len(p.Assets) == 0:
		return nil, fmt.Errorf("%w: no assets allowed", ErrInvalidPolicy)
	case p.Upto < UptoPrefer || p.Upto > UptoRefuse:
		return nil, fmt.Errorf("%w: Upto is %v", ErrInvalidPolicy, p.Upto)
	}
	r := &rules{max: p.MaxPerRequest, budget: p.Budget, assets: make(map[string][]common.Address, len(p.Assets)), upto: p.Upto, balances: p.Balances}
	for i, a := range p.Assets {
		if _, err := exact.ChainID(a.Network); err != nil {
			return nil, fmt.Errorf("%w: Assets[%d]: %w", ErrInvalidPolicy, i, err)
		}
		addr, err := exact.ParseAddress(a.Address)
		if err != nil {
			return nil, fmt.Errorf("%w: Assets[%d] address %q: %w", ErrInvalidPolicy, i, a.Address, err)
		}
		r.assets[a.Network] = append(r.assets[a.Network], addr)
	}
	for i, a := range p.PayTo {
		addr, err := exact.ParseAddress(a)
		if err != nil {
			return nil, fmt.Errorf("%w: PayTo[%d] %q: %w", ErrInvalidPolicy, i, a, err)
		}
		if r.payTo == nil {
			r.payTo = map[common.Address]bool{}
		}
		r.payTo[addr] = true
	}
	for i, o := range p.Origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("%w: Origins[%d] %q is not an origin such as https://api.example.com", ErrInvalidPolicy, i, o)
		}
		if r.origins == nil {
			r.origins = map[string]bool{}
		}
		r.origins[policyOrigin(u)] = true
	}
	return r, nil
}

// policyOrigin is u's scheme://host:port, lower-case, with the default port
// made explicit, so that equal origins compare equal.
func policyOrigin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(hostPort(u))
}

// refuseOrigin reports every option of pr refused because origin u is not
// allowed, or nil when the policy allows it.
func (r *rules) refuseOrigin(u *url.URL, pr *x402.PaymentRequired) []Option {
	if r.origins == nil || r.origins[policyOrigin(u)] {
		return nil
	}
	opts := make([]Option, len(pr.Accepts))
	for i, req := range pr.Accepts {
		opts[i] = Option{Index: i, Requirements: req, RefusalError: RefusedOrigin, Label: "origin " + policyOrigin(u) + " is not allowed by the policy"}
	}
	return opts
}

// Payment flows of extra.paymentFlow, as @x402/core 2.27 names them. Absent means
// authorization.
const (
	flowAuthorization = "authorization"
	flowUpfront       = "upfront"
	flowEscrow        = "escrow"
)

// verdict is the policy's answer on one requirement, before the budget.
type verdict struct {
	amount  *big.Int
	upfront bool
	upto    bool
	refusal RefusalError
	label   string
}

func refuse(r RefusalError, format string, args ...any) verdict {
	return verdict{refusal: r, label: fmt.Sprintf(format, args...)}
}

// judge runs every check of one requirement except the budget, which depends on
// the other calls in flight.
func (r *rules) judge(req x402.PaymentRequirements) verdict {
	switch req.Scheme {
	case exact.Scheme:
	case upto.Scheme:
		if r.upto == UptoRefuse {
			return refuse(RefusedUpto, "the upto scheme is refused by the policy")
		}
	case SchemeNeverminedERC4337, SchemeNeverminedCardDelegation:
		return refuse(RefusedNevermined, LabelNevermined)
	default:
		return refuse(RefusedForeignScheme, "foreign scheme %q, never paid", req.Scheme)
	}
	flow, err := paymentFlow(req.Extra)
	if err != nil {
		return refuse(RefusedOffer, "%v", err)
	}
	switch flow {
	case "", flowAuthorization:
	case flowUpfront:
		if req.Scheme == upto.Scheme {
			return refuse(RefusedPaymentFlow, "payment flow %q is not supported by the upto scheme", flow)
		}
	case flowEscrow:
		return refuse(RefusedPaymentFlow, "payment flow %q is not supported by the %s scheme", flow, req.Scheme)
	default:
		return refuse(RefusedPaymentFlow, "unknown payment flow %q", flow)
	}
	if _, err := exact.ChainID(req.Network); err != nil {
		return refuse(RefusedNetwork, "network %q is not an eip155 chain this client can sign for", req.Network)
	}
	allowed, ok := r.assets[req.Network]
	if !ok {
		return refuse(RefusedNetwork, "network %s is not allowed by the policy", req.Network)
	}
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return refuse(RefusedOffer, "asset %q: %v", req.Asset, err)
	}
	found := false
	for _, a := range allowed {
		found = found || a == asset
	}
	if !found {
		return refuse(RefusedAsset, "asset %s is not allowed on %s by the policy", req.Asset, req.Network)
	}
	if req.Scheme == upto.Scheme {
		// The permit names the one facilitator that may settle it; without a
		// valid address there is nobody to name.
		extra, err := upto.ParseExtra(req.Extra)
		if err != nil {
			return refuse(RefusedOffer, "upto offer without a valid facilitator: %v", err)
		}
		if extra.FacilitatorAddress == (common.Address{}) {
			return refuse(RefusedOffer, "upto offer without a valid facilitator: extra.facilitatorAddress is the zero address")
		}
	} else if _, err := exact.ParseExtra(req.Extra); err != nil {
		return refuse(RefusedOffer, "%v", err)
	}
	payTo, err := exact.ParseAddress(req.PayTo)
	if err != nil {
		return refuse(RefusedOffer, "payTo %q: %v", req.PayTo, err)
	}
	if r.payTo != nil && !r.payTo[payTo] {
		return refuse(RefusedPayTo, "recipient %s is not allowed by the policy", payTo.Hex())
	}
	amount, err := exact.ParseUint256(req.Amount)
	if err != nil {
		return refuse(RefusedOffer, "amount %q: %v", req.Amount, err)
	}
	if req.MaxTimeoutSeconds <= 0 || req.MaxTimeoutSeconds > exact.MaxSignedTimeout {
		return refuse(RefusedOffer, "maxTimeoutSeconds %d is outside (0, %d]", req.MaxTimeoutSeconds, exact.MaxSignedTimeout)
	}
	if amount.Cmp(r.max) > 0 {
		return refuse(RefusedOverMaximum, "amount %s is over the per-request maximum %s", amount, r.max)
	}
	return verdict{amount: amount, upfront: flow == flowUpfront, upto: req.Scheme == upto.Scheme}
}

// paymentFlow reads extra.paymentFlow: "" when extra or the key is absent, the
// value itself when it is a string, and "(not a string)" otherwise, which no
// check accepts.
func paymentFlow(extra json.RawMessage) (string, error) {
	if len(extra) == 0 || string(extra) == "null" {
		return "", nil
	}
	var e struct {
		PaymentFlow any `json:"paymentFlow"`
	}
	if err := json.Unmarshal(extra, &e); err != nil {
		return "", errors.New("extra is not a JSON object")
	}
	switch f := e.PaymentFlow.(type) {
	case nil:
		return "", nil
	case string:
		return f, nil
	default:
		return "(not a string)", nil
	}
}

// rank orders the payable options, lowest first: upto before anything else
// under UptoPrefer, then, like the official client, the authorization flow
// before upfront.
func (r *rules) rank(v verdict) int {
	n := 0
	if !v.upto || r.upto != UptoPrefer {
		n += 2
	}
	if v.upfront {
		n++
	}
	return n
}

// choose judges every requirement of pr against r and what is left of the
// budget, and returns the index of the one to pay (-1 for none) with the verdict
// on each. It prefers the option of lowest rank, then the server's order. An
// option in r.unfunded is refused for the balance read.
func (r *rules) choose(pr *x402.PaymentRequired, remaining *big.Int) (int, *big.Int, []Option) {
	opts := make([]Option, len(pr.Accepts))
	best, bestRank := -1, 0
	var amount *big.Int
	for i, req := range pr.Accepts {
		v := r.judge(req)
		if v.refusal == "" && v.amount.Cmp(remaining) > 0 {
			v = refuse(RefusedOverBudget, "amount %s is over the remaining budget %s", v.amount, remaining)
		}
		if u, ok := r.unfunded[i]; ok && v.refusal == "" {
			v = u
		}
		opts[i] = Option{Index: i, Requirements: req, RefusalError: v.refusal, Label: v.label}
		if v.refusal != "" {
			continue
		}
		if rank := r.rank(v); best < 0 || rank < bestRank {
			best, bestRank, amount = i, rank, v.amount
		}
	}
	if best >= 0 {
		opts[best].Label = "chosen"
	}
	return best, amount, opts
}
