package config

import (
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

func TestDashboardConfig(t *testing.T) {
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Dashboard.On() {
		t.Error("the dashboard is off by default")
	}
	if admins := c.AdminAddresses(); len(admins) != 1 || admins[0] != common.HexToAddress(c.Network.PayTo) {
		t.Errorf("AdminAddresses = %v, want pay_to alone", admins)
	}
	const admin = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	c, err = Parse([]byte(base + "dashboard:\n  enabled: false\n  admins: [\"" + admin + "\"]\n  tx_url: https://basescan.org/tx/%s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Dashboard.On() || len(c.AdminAddresses()) != 2 || c.AdminAddresses()[1] != common.HexToAddress(admin) {
		t.Errorf("dashboard %+v, admins %v", c.Dashboard, c.AdminAddresses())
	}
}

func TestDashboardConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"admin not an address", "  admins: [\"alice\"]\n", "dashboard.admins"},
		{"admin without 0x", "  admins: [\"70997970C51812dc3A010C7d01b50e0d17dc79C8\"]\n", "dashboard.admins"},
		{"admin with markup", "  admins: [\"<script>\"]\n", "dashboard.admins"},
		{"tx_url without %s", "  tx_url: https://basescan.org/tx/\n", "dashboard.tx_url"},
		{"tx_url with two %s", "  tx_url: https://basescan.org/%s/tx/%s\n", "dashboard.tx_url"},
		{"tx_url javascript", "  tx_url: \"javascript:alert(1)//%s\"\n", "dashboard.tx_url"},
		{"tx_url with a quote", "  tx_url: \"https://x.example/tx/%s\\\"onmouseover=\"\n", "dashboard.tx_url"},
		{"tx_url relative", "  tx_url: /tx/%s\n", "dashboard.tx_url"},
		{"unknown key", "  theme: dark\n", "theme"},
		{"enabled not a bool", "  enabled: maybe\n", "enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base + "dashboard:\n" + tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}
