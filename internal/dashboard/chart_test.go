package dashboard

import (
	"math/big"
	"strconv"
	"testing"
)

func TestStack(t *testing.T) {
	label := func(v *big.Int) string { return v.String() }
	labels := []string{"d0", "d1", "d2", "d3"}
	s := series{}
	// Seven series: five named, two summed as "other"; d2 is the peak.
	for i := range 7 {
		s.add("m"+strconv.Itoa(i), 2, 4, big.NewInt(int64(100-i)))
	}
	s.add("m0", 0, 4, big.NewInt(1)) // tiny: still one pixel
	s.add("m0", 9, 4, big.NewInt(5)) // outside the slots: ignored
	c := stack("c", "test", s, labels, 400, 100, label)
	if len(c.Bars) != 4 || c.Peak != "679" {
		t.Fatalf("bars %d, peak %s; want 4 bars, peak 679", len(c.Bars), c.Peak)
	}
	if len(c.Legend) != 6 || c.Legend[0].Name != "m0" || c.Legend[5].Name != "other" || c.Legend[5].Amount != "189" {
		t.Errorf("legend %+v: want m0..m4 then other (95+94)", c.Legend)
	}
	peak := c.Bars[2]
	sum := 0
	for _, seg := range peak.Segments {
		sum += seg.H
		if seg.Y < 0 || seg.Y+seg.H > c.H {
			t.Errorf("segment %+v outside the box", seg)
		}
	}
	if len(peak.Segments) != 6 || sum > c.H || sum < c.H-6 {
		t.Errorf("peak bar: %d segments of %d px in all; want 6 filling about %d px", len(peak.Segments), sum, c.H)
	}
	if tiny := c.Bars[0].Segments; len(tiny) != 1 || tiny[0].H != 1 {
		t.Errorf("a day with a little spend: %+v, want one 1-px segment", tiny)
	}
	if len(c.Bars[1].Segments) != 0 || len(c.Bars[3].Segments) != 0 {
		t.Error("days without spend have segments")
	}
	if empty := stack("e", "empty", series{}, labels, 400, 100, label); empty.Peak != "0" || len(empty.Legend) != 0 {
		t.Errorf("an empty chart: %+v", empty)
	}
	// Amounts beyond int64 are drawn without overflow.
	huge := series{}
	huge.add("a", 0, 1, new(big.Int).Lsh(big.NewInt(1), 200))
	if c := stack("h", "huge", huge, []string{"d"}, 10, 100, label); c.Bars[0].Segments[0].H != 100 {
		t.Errorf("a 2^200 bar: %+v", c.Bars[0].Segments)
	}
}
