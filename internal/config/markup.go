package config

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/llm4agents/llm4agents/internal/pricing"
)

// Pricing sets the price of a model that has none of its own: its provider's
// cost for it (Upstream.Prices, by upstream_model) plus Markup, so an
// operator can sell at cost + x% without working out atomic units per model.
// The buyer's quote is still the model's price, whichever provider answers.
type Pricing struct {
	// Markup is in basis points: 2000 sells at cost + 20%. 0 to
	// pricing.MaxMarkup (1000%). A whole number: a float is refused.
	Markup BasisPoints `yaml:"markup"`
}

// BasisPoints is a whole number of hundredths of a percent. YAML would read
// 12.5 into an integer as 12; this refuses it, as money in the file is never
// a float.
type BasisPoints int64

// UnmarshalYAML implements yaml.Unmarshaler: a YAML integer only.
func (b *BasisPoints) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into a whole number of basis points (2000 is 20%%)",
			n.Line, n.Tag, truncate(n.Value))}}
	}
	*b = BasisPoints(v)
	return nil
}

// markedUp is the price of m at cost + markup; the zero Price when its
// upstream lists no cost for it.
func (c *Config) markedUp(m Model) (Price, error) {
	u := c.upstream(m.Upstream)
	if u == nil {
		return Price{}, nil
	}
	cost, ok := u.Prices[m.UpstreamModel]
	if !ok {
		return Price{}, nil
	}
	parsed, err := cost.Parse()
	if err != nil {
		return Price{}, err
	}
	if c.Pricing.Markup < 0 {
		return Price{}, fmt.Errorf("pricing.markup %d is negative", c.Pricing.Markup)
	}
	sell, err := pricing.WithMarkup(parsed, uint64(c.Pricing.Markup))
	if err != nil {
		return Price{}, err
	}
	out := Price{Input: strconv.FormatUint(sell.Input, 10)}
	if m.Kind != KindEmbeddings {
		out.Output = strconv.FormatUint(sell.Output, 10)
	}
	return out, nil
}

// missingPrice says why m has no price, and how to give it one.
func (c *Config) missingPrice(m Model) string {
	if _, err := c.markedUp(m); err != nil {
		return fmt.Sprintf("cannot be set from upstream %s's cost for %q: %v", m.Upstream, truncate(m.UpstreamModel), err)
	}
	return fmt.Sprintf("is required: {input, output} in atomic units of the asset per million tokens, such as "+
		"{input: \"150000\", output: \"600000\"}; or list upstream %s's cost for %q in its prices, to sell at cost + pricing.markup",
		truncate(m.Upstream), truncate(m.UpstreamModel))
}

func (c *Config) upstream(name string) *Upstream {
	for i := range c.Upstreams {
		if c.Upstreams[i].Name == name {
			return &c.Upstreams[i]
		}
	}
	return nil
}

func (c *Config) validatePricing(p *problems) {
	if m := c.Pricing.Markup; m < 0 || m > pricing.MaxMarkup {
		p.add("pricing.markup", "%d must be from 0 to %d basis points (2000 is cost + 20%%)", m, pricing.MaxMarkup)
	}
	for i, u := range c.Upstreams {
		for name, cost := range u.Prices {
			at := fmt.Sprintf("upstreams[%d].prices.%s", i, name)
			if !printableName(name) {
				p.add(fmt.Sprintf("upstreams[%d].prices", i), "%q is not a model name: printable, without spaces, at most 256 bytes", truncate(name))
				continue
			}
			checkPrice(p, at+".input", cost.Input, c.Network.Decimals)
			if cost.Output != "" {
				checkPrice(p, at+".output", cost.Output, c.Network.Decimals)
			}
		}
	}
}
