package config

import "math/big"

// Receipts turns on signed receipts for the x402 payments of a gateway that
// sells no credits (docs/DESIGN.md D18): every paid call, exact or upto,
// gets an EIP-712 receipt, kept in the store, which its payer reads after a
// wallet sign-in. With credits on, receipts are always on and this section
// may hold their key instead of credits.receipt_key_file.
type Receipts struct {
	// Enabled turns receipts on without credits; off by default (credits
	// turn them on by themselves).
	Enabled bool `yaml:"enabled"`
	// KeyFile or KeyEnv is where the key that signs receipts is: exactly
	// one of them, a 32-byte hex private key. With credits on, it may be
	// given here or as credits.receipt_key_file (or _env), not both. Use a
	// key of its own, never the facilitator's.
	KeyFile string `yaml:"key_file"`
	KeyEnv  string `yaml:"key_env"`
	// ChainID is the chainId of the receipts' EIP-712 domain and of sign-in
	// messages. Default: the payment network's chain id (or
	// credits.receipt_chain_id).
	ChainID uint64 `yaml:"chain_id"`
	// SignInOrigin is the origin (scheme://host[:port]) that wallet sign-in
	// messages must name (EIP-4361). Default: the origin of public_url (or
	// credits.sign_in_origin).
	SignInOrigin string `yaml:"sign_in_origin"`
}

// ReceiptsOn reports whether the gateway signs receipts: with credits, or
// with receipts.enabled.
func (c *Config) ReceiptsOn() bool { return c.Credits.Enabled || c.Receipts.Enabled }

// validateReceipts checks where the receipt key, the receipts' chain id and
// the sign-in origin come from: each is said in one place, receipts or
// credits.
func (c *Config) validateReceipts(p *problems) {
	r, cr := &c.Receipts, &c.Credits
	if !c.ReceiptsOn() {
		return
	}
	ownKey := r.KeyFile != "" || r.KeyEnv != ""
	creditKey := cr.Enabled && (cr.ReceiptKeyFile != "" || cr.ReceiptKeyEnv != "")
	switch {
	case ownKey && creditKey:
		p.add("receipts.key_file", "the receipt key is set twice, here and in credits.receipt_key_file (or _env): keep one")
	case r.KeyFile != "" && r.KeyEnv != "":
		p.add("receipts.key_env", "set key_file or key_env, not both")
	case r.KeyEnv != "":
		checkEnvName(p, "receipts.key_env", r.KeyEnv)
	case !ownKey && !cr.Enabled && !c.demo:
		p.add("receipts.key_file", "is required with receipts: the receipt signing key's file (or set key_env)")
	}
	if cr.Enabled && r.ChainID != 0 && cr.ReceiptChainID != 0 && r.ChainID != cr.ReceiptChainID {
		p.add("receipts.chain_id", "%d differs from credits.receipt_chain_id %d: keep one", r.ChainID, cr.ReceiptChainID)
	}
	if cr.Enabled && r.SignInOrigin != "" && cr.SignInOrigin != "" && r.SignInOrigin != cr.SignInOrigin {
		p.add("receipts.sign_in_origin", "differs from credits.sign_in_origin: keep one")
	}
	if r.SignInOrigin != "" {
		if msg := checkOrigin(r.SignInOrigin); msg != "" {
			p.add("receipts.sign_in_origin", "%s", msg)
		}
	}
}

// receiptKeySource returns where the receipt key is: receipts' own
// fields when set, else credits'.
func (c *Config) receiptKeySource() (file, env string) {
	if r := c.Receipts; r.KeyFile != "" || r.KeyEnv != "" {
		return r.KeyFile, r.KeyEnv
	}
	return c.Credits.ReceiptKeyFile, c.Credits.ReceiptKeyEnv
}

// receiptChainID returns the chain id set for receipts, 0 for none.
func (c *Config) receiptChainID() *big.Int {
	switch {
	case c.Receipts.ChainID != 0:
		return new(big.Int).SetUint64(c.Receipts.ChainID)
	case c.Credits.Enabled && c.Credits.ReceiptChainID != 0:
		return new(big.Int).SetUint64(c.Credits.ReceiptChainID)
	}
	return nil
}

// signInOrigin returns the sign-in origin set for receipts or credits,
// "" for none.
func (c *Config) signInOrigin() string {
	if c.Receipts.SignInOrigin != "" {
		return c.Receipts.SignInOrigin
	}
	if c.Credits.Enabled {
		return c.Credits.SignInOrigin
	}
	return ""
}
