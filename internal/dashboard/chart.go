package dashboard

import (
	"cmp"
	"math/big"
	"slices"
	"strconv"
)

// Charts are drawn on the server as SVG rectangles: no script, no charting
// library. Every height is a whole number of pixels computed from the
// amounts with big.Int; no amount passes through a float.

// maxSeries is how many series a chart names; the rest are summed as
// "other".
const maxSeries = 5

// chart is a stacked bar chart: one bar per slot (a day, an hour), one
// segment per series.
type chart struct {
	ID, Label string
	W, H      int
	Bars      []stackedBar
	Legend    []legendItem
	Peak      string // the tallest bar's amount
}

type stackedBar struct {
	X, W       int
	LabelX     int
	Slot       string // the slot's label: "Dec 3", "14:00"
	ShowLabel  bool
	Total      string
	Segments   []segment
	totalValue *big.Int
}

type segment struct {
	Y, H   int
	Class  string // s0..s4 for the named series, s5 for "other"
	Series string
	Amount string
}

type legendItem struct {
	Name, Class, Amount string
}

// series is the amount of one series in each slot.
type series map[string][]*big.Int

// add adds amt to name's slot i, for n slots in all.
func (s series) add(name string, i, n int, amt *big.Int) {
	if i < 0 || i >= n || amt == nil {
		return
	}
	v := s[name]
	if v == nil {
		v = make([]*big.Int, n)
		for j := range v {
			v[j] = new(big.Int)
		}
		s[name] = v
	}
	v[i].Add(v[i], amt)
}

// stack draws s over the slots labels (oldest first), in a w×h box. The
// series with the most in all are named, largest first; the rest are "other".
func stack(id, label string, s series, labels []string, w, h int, amount func(*big.Int) string) chart {
	c := chart{ID: id, Label: label, W: w, H: h}
	n := len(labels)
	if n == 0 {
		return c
	}
	totals := map[string]*big.Int{}
	names := make([]string, 0, len(s))
	for name, v := range s {
		t := new(big.Int)
		for _, x := range v {
			t.Add(t, x)
		}
		totals[name] = t
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := totals[b].Cmp(totals[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	shown := names[:min(len(names), maxSeries)]
	other := make([]*big.Int, n)
	for i := range other {
		other[i] = new(big.Int)
	}
	otherTotal := new(big.Int)
	for _, name := range names[len(shown):] {
		for i, x := range s[name] {
			other[i].Add(other[i], x)
		}
		otherTotal.Add(otherTotal, totals[name])
	}
	for i, name := range shown {
		c.Legend = append(c.Legend, legendItem{Name: name, Class: "s" + strconv.Itoa(i), Amount: amount(totals[name])})
	}
	if otherTotal.Sign() > 0 {
		c.Legend = append(c.Legend, legendItem{Name: "other", Class: "s5", Amount: amount(otherTotal)})
	}

	slot := w / n
	peak := new(big.Int)
	for i, slotLabel := range labels {
		b := stackedBar{X: i*slot + 2, W: max(slot-4, 1), LabelX: i*slot + slot/2, Slot: slotLabel, totalValue: new(big.Int)}
		for _, name := range shown {
			b.totalValue.Add(b.totalValue, s[name][i])
		}
		b.totalValue.Add(b.totalValue, other[i])
		if b.totalValue.Cmp(peak) > 0 {
			peak.Set(b.totalValue)
		}
		b.Total = amount(b.totalValue)
		c.Bars = append(c.Bars, b)
	}
	c.Peak = amount(peak)
	labelEvery := max(1, n/7)
	for i := range c.Bars {
		b := &c.Bars[i]
		b.ShowLabel = (n-1-i)%labelEvery == 0
		if peak.Sign() == 0 {
			continue
		}
		y := h // segments stack up from the bottom
		put := func(class, name string, v *big.Int) {
			if v.Sign() == 0 {
				return
			}
			px := int(new(big.Int).Quo(new(big.Int).Mul(v, big.NewInt(int64(h))), peak).Int64())
			px = max(px, 1) // a series with spend that day is never invisible
			px = min(px, y)
			y -= px
			b.Segments = append(b.Segments, segment{Y: y, H: px, Class: class, Series: name, Amount: amount(v)})
		}
		for j, name := range shown {
			put("s"+strconv.Itoa(j), name, s[name][i])
		}
		put("s5", "other", other[i])
	}
	return c
}
