package config

import (
	"net/url"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// Dashboard is the web dashboard at /dashboard (internal/dashboard): a
// wallet sign-in, each buyer's account, and the operator's view. It needs
// the sign-in, so it is served only when receipts are on (credits or
// receipts.enabled); otherwise /dashboard says how to turn it on.
type Dashboard struct {
	// Enabled serves the dashboard; default true.
	Enabled *bool `yaml:"enabled"`
	// Admins are the wallet addresses, besides network.pay_to, that see the
	// operator's view.
	Admins []string `yaml:"admins,omitempty"`
	// TxURL links transactions to a block explorer: a URL with one %s for
	// the transaction hash, e.g. https://basescan.org/tx/%s. Default: no
	// links, the hash alone.
	TxURL string `yaml:"tx_url"`
}

// maxAdmins bounds dashboard.admins.
const maxAdmins = 100

// On reports whether the dashboard is served.
func (d Dashboard) On() bool { return d.Enabled == nil || *d.Enabled }

// AdminAddresses returns the operator's addresses: pay_to and the admins.
func (c *Config) AdminAddresses() []common.Address {
	out := make([]common.Address, 0, 1+len(c.Dashboard.Admins))
	if common.IsHexAddress(c.Network.PayTo) {
		out = append(out, common.HexToAddress(c.Network.PayTo))
	}
	for _, a := range c.Dashboard.Admins {
		out = append(out, common.HexToAddress(a))
	}
	return out
}

func (c *Config) validateDashboard(p *problems) {
	d := c.Dashboard
	if len(d.Admins) > maxAdmins {
		p.add("dashboard.admins", "has %d addresses, at most %d", len(d.Admins), maxAdmins)
	}
	for i, a := range d.Admins {
		if !strings.HasPrefix(a, "0x") || !common.IsHexAddress(a) {
			p.add("dashboard.admins", "entry %d %q is not a 0x-prefixed address", i, truncate(a))
		}
	}
	if d.TxURL != "" {
		u, err := url.Parse(strings.Replace(d.TxURL, "%s", "0", 1))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Count(d.TxURL, "%s") != 1 ||
			strings.ContainsAny(d.TxURL, "\"'<> \t\r\n") {
			p.add("dashboard.tx_url", "%q is not an http(s) URL with exactly one %%s for the transaction hash", truncate(d.TxURL))
		}
	}
}
