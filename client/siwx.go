package client

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// ExtensionSignInWithX is the key under which a 402 declares the
// sign-in-with-x extension (x402 v2 spec, github.com/x402-foundation/x402
// specs/extensions/sign-in-with-x.md): the server lets a wallet that
// already paid in again on a signed EIP-4361 message instead of a payment.
const ExtensionSignInWithX = "sign-in-with-x"

// Bounds on what a server's sign-in-with-x offer may hold.
const (
	maxSIWXField     = 1024
	maxSIWXResources = 16
	minSIWXNonce     = 8
)

// ErrSignInRefused is wrapped by the error of SignInWithX when the offer is
// not one this package signs: malformed, for another origin, or for no
// chain its Signer can sign on. The error never quotes the offer's text.
var ErrSignInRefused = errors.New("client: sign-in-with-x offer refused")

// siwxInfo is the server's info: what the proof echoes and the message says.
// The dynamic fields (nonce, issuedAt, expirationTime) change on every 402,
// which is why a proof is minted per request and never kept.
type siwxInfo struct {
	Domain         string   `json:"domain"`
	URI            string   `json:"uri"`
	Version        string   `json:"version"`
	Nonce          string   `json:"nonce"`
	IssuedAt       string   `json:"issuedAt"`
	Statement      string   `json:"statement,omitempty"`
	ExpirationTime string   `json:"expirationTime,omitempty"`
	NotBefore      string   `json:"notBefore,omitempty"`
	RequestID      string   `json:"requestId,omitempty"`
	Resources      []string `json:"resources,omitempty"`
}

type siwxChain struct {
	ChainID         string `json:"chainId"`
	Type            string `json:"type"`
	SignatureScheme string `json:"signatureScheme,omitempty"`
}

type siwxOffer struct {
	Info            *siwxInfo       `json:"info"`
	SupportedChains []siwxChain     `json:"supportedChains"`
	Schema          json.RawMessage `json:"schema"`
}

// siwxProof is the SIGN-IN-WITH-X header's JSON: the info echoed, and who
// signed it on which chain.
type siwxProof struct {
	siwxInfo
	Address         string `json:"address"`
	ChainID         string `json:"chainId"`
	Type            string `json:"type"`
	SignatureScheme string `json:"signatureScheme,omitempty"`
	Signature       string `json:"signature"`
}

// SignInMessage is an EIP-4361 (Sign-In with Ethereum) message, written as
// the official x402 client and the gateway's /v1/auth/verify read it. The
// times are kept as the server wrote them: a SIGN-IN-WITH-X proof echoes
// them, and the server rebuilds the text from the echo.
type SignInMessage struct {
	Domain         string // host[:port] of the origin asking
	Address        common.Address
	Statement      string // optional
	URI            string
	Version        string // "1"
	ChainID        uint64
	Nonce          string
	IssuedAt       string // RFC 3339
	ExpirationTime string // optional, RFC 3339
	NotBefore      string // optional, RFC 3339
	RequestID      string // optional
	Resources      []string
}

// String returns the text a wallet signs: LF line ends, no trailing newline,
// the address in its EIP-55 form, and two empty lines before URI when there
// is no statement, as the sign-in-with-x extension lays out EIP-4361.
func (m *SignInMessage) String() string {
	lines := []string{m.Domain + " wants you to sign in with your Ethereum account:", m.Address.Hex(), ""}
	if m.Statement != "" {
		lines = append(lines, m.Statement)
	}
	lines = append(lines, "",
		"URI: "+m.URI,
		"Version: "+m.Version,
		"Chain ID: "+strconv.FormatUint(m.ChainID, 10),
		"Nonce: "+m.Nonce,
		"Issued At: "+m.IssuedAt)
	if m.ExpirationTime != "" {
		lines = append(lines, "Expiration Time: "+m.ExpirationTime)
	}
	if m.NotBefore != "" {
		lines = append(lines, "Not Before: "+m.NotBefore)
	}
	if m.RequestID != "" {
		lines = append(lines, "Request ID: "+m.RequestID)
	}
	if len(m.Resources) > 0 {
		lines = append(lines, "Resources:")
		for _, r := range m.Resources {
			lines = append(lines, "- "+r)
		}
	}
	return strings.Join(lines, "\n")
}

// SignText signs text as EIP-191 personal_sign does, with v in {27, 28}.
func SignText(ctx context.Context, s exact.Signer, text string) ([]byte, error) {
	sig, err := s.SignDigest(ctx, common.BytesToHash(accounts.TextHash([]byte(text))))
	if err != nil {
		return nil, fmt.Errorf("client: sign message: %w", err)
	}
	return sig, nil
}

// signInOffered reports whether pr declares sign-in-with-x.
func signInOffered(pr *x402.PaymentRequired) bool {
	_, ok := pr.Extensions[ExtensionSignInWithX]
	return ok
}

// mintSignIn returns a fresh SIGN-IN-WITH-X value for the request to u,
// answering the offer in pr, signed by s. It refuses an offer whose domain or
// URI is not u's origin, whose fields could change the signed text's lines,
// or that names no eip155 chain with EIP-191 signatures.
func mintSignIn(ctx context.Context, s exact.Signer, pr *x402.PaymentRequired, u *url.URL) (Secret, error) {
	refuse := func(format string, args ...any) (Secret, error) {
		return "", fmt.Errorf("%w: %s", ErrSignInRefused, fmt.Sprintf(format, args...))
	}
	var offer siwxOffer
	if err := x402.Unmarshal(pr.Extensions[ExtensionSignInWithX], &offer); err != nil || offer.Info == nil {
		return refuse("not an object with info and supportedChains")
	}
	info := offer.Info
	if err := checkSIWXInfo(info); err != nil {
		return refuse("%v", err)
	}
	if !strings.EqualFold(info.Domain, u.Host) {
		return refuse("domain is not the request's host %s", u.Host)
	}
	for _, r := range append([]string{info.URI}, info.Resources...) {
		ru, err := url.Parse(r)
		if err != nil || !ru.IsAbs() || ru.User != nil || !sameOrigin(ru, u) {
			return refuse("uri or a resource is not on the request's origin %s", policyOrigin(u))
		}
	}
	chain, chainID, ok := pickSIWXChain(offer.SupportedChains)
	if !ok {
		return refuse("no eip155 chain with eip191 signatures is offered")
	}
	m := SignInMessage{
		Domain: info.Domain, Address: s.Address(), Statement: info.Statement, URI: info.URI,
		Version: info.Version, ChainID: chainID, Nonce: info.Nonce, IssuedAt: info.IssuedAt,
		ExpirationTime: info.ExpirationTime, NotBefore: info.NotBefore, RequestID: info.RequestID,
		Resources: info.Resources,
	}
	sig, err := SignText(ctx, s, m.String())
	if err != nil {
		return "", err
	}
	v, err := x402.EncodeHeader(siwxProof{
		siwxInfo: *info, Address: s.Address().Hex(), ChainID: chain.ChainID, Type: chain.Type,
		SignatureScheme: chain.SignatureScheme, Signature: "0x" + hex.EncodeToString(sig),
	})
	if err != nil {
		return "", fmt.Errorf("client: encode sign-in: %w", err)
	}
	return Secret(v), nil
}

// checkSIWXInfo checks the fields that become lines of the signed text: a
// line break or control character in any of them could forge a line.
func checkSIWXInfo(info *siwxInfo) error {
	fields := append([]string{info.Domain, info.URI, info.Version, info.Nonce, info.IssuedAt, info.Statement,
		info.ExpirationTime, info.NotBefore, info.RequestID}, info.Resources...)
	for _, f := range fields {
		if len(f) > maxSIWXField || !printableASCII(f) {
			return fmt.Errorf("a field is longer than %d bytes or holds a character other than printable ASCII", maxSIWXField)
		}
	}
	switch {
	case info.Domain == "" || info.URI == "" || info.Nonce == "" || info.IssuedAt == "":
		return errors.New("domain, uri, nonce or issuedAt is missing")
	case info.Version != "1":
		return errors.New("version is not 1")
	case len(info.Nonce) < minSIWXNonce || !alphanumeric(info.Nonce):
		return fmt.Errorf("nonce is not at least %d letters and digits", minSIWXNonce)
	case len(info.Resources) > maxSIWXResources:
		return fmt.Errorf("more than %d resources", maxSIWXResources)
	case strings.HasPrefix(info.Statement, "URI: ") || strings.Contains(info.RequestID, " "):
		return errors.New("statement or requestId would read as another field")
	}
	for _, t := range []string{info.IssuedAt, info.ExpirationTime, info.NotBefore} {
		if t == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, t); err != nil {
			return errors.New("a time is not RFC 3339")
		}
	}
	return nil
}

// pickSIWXChain takes the first chain a key signer can sign for, as the
// official client takes the first that matches its wallet.
func pickSIWXChain(chains []siwxChain) (siwxChain, uint64, bool) {
	for _, c := range chains {
		if c.Type != "eip191" || (c.SignatureScheme != "" && c.SignatureScheme != "eip191") {
			continue
		}
		id, err := exact.ChainID(c.ChainID)
		if err != nil || !id.IsUint64() {
			continue
		}
		return c, id.Uint64(), true
	}
	return siwxChain{}, 0, false
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

func alphanumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}
