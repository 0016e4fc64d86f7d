package config

import "fmt"

// validateUpstreamAPIs checks that every provider of a chat model speaks the
// same APIs: a model whose upstream speaks the Responses API and one of
// whose fallbacks does not (or the reverse) would be passed through or
// translated depending on which provider answers, so the buyer could not
// know what their request means. Unknown upstreams are validateModels'.
func (c *Config) validateUpstreamAPIs(p *problems) {
	speaks := map[string]bool{}
	for _, u := range c.Upstreams {
		speaks[u.Name] = u.Responses
	}
	for i, m := range c.Models {
		if m.Kind == KindEmbeddings {
			continue
		}
		first, ok := speaks[m.Upstream]
		if !ok {
			continue
		}
		for j, f := range m.Fallbacks {
			if other, ok := speaks[f.Upstream]; ok && other != first {
				p.add(fmt.Sprintf("models[%d].fallbacks[%d].upstream", i, j),
					"%q %s the Responses API and upstream %q %s: every provider of a model must agree (set responses on both, or on neither)",
					f.Upstream, speaksWord(other), m.Upstream, speaksWord(first))
			}
		}
	}
}

func speaksWord(b bool) string {
	if b {
		return "speaks"
	}
	return "does not speak"
}
