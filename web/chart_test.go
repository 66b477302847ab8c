package web

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestNiceScale(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		v         float64
		top, step float64
	}{
		{"empty", 0, 4, 1},
		{"tiny", 3, 3, 1},
		{"forty-seven", 47, 60, 20},
		{"a hundred", 100, 100, 25},
		{"allotment", 100_000, 100_000, 25_000},
		{"odd", 878_818, 1_000_000, 250_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			top, step := niceScale(c.v)
			if top != c.top || step != c.step {
				t.Errorf("niceScale(%v) = %v, %v; want %v, %v", c.v, top, step, c.top, c.step)
			}
			if top < c.v {
				t.Errorf("top %v below the value %v", top, c.v)
			}
		})
	}
}

func TestCountAndCompact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n     int64
		count string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {1234567, "1,234,567"}, {-4500, "-4,500"}} {
		if got := Count(c.n); got != c.count {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.count)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{950, "950"}, {1500, "1.5k"}, {25_000, "25k"}, {3_000_000, "3M"}, {2.5, "2.5"}} {
		if got := Compact(c.v); got != c.want {
			t.Errorf("Compact(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestPlotStacksBarsWithinThePlotArea(t *testing.T) {
	t.Parallel()
	c := Chart{Kind: StackedBars, Columns: 3, Series: []Series{
		{Name: "allowed", Class: "s-allowed", Values: []float64{10, 0, 30}},
		{Name: "refused", Class: "s-policy", Values: []float64{10, 5, 0}},
	}, Lines: []RefLine{{Value: 50, Label: "allotment", Class: "allotment-line"}}, Bands: []Band{{From: 1, To: 2}}}
	p := c.Plot()
	// Zero values draw nothing: four bars of five values.
	if len(p.Rects) != 4 {
		t.Fatalf("%d bars, want 4", len(p.Rects))
	}
	// The scale holds the reference line, above the highest stack (30).
	if got := p.YTicks[len(p.YTicks)-1].Label; got != "60" {
		t.Errorf("top tick %q, want 60", got)
	}
	// The refused bar of column 0 sits on its allowed bar: its bottom is the
	// other's top.
	a, r := p.Rects[0], p.Rects[2]
	ay, _ := strconv.ParseFloat(a.Y, 64)
	ry, _ := strconv.ParseFloat(r.Y, 64)
	rh, _ := strconv.ParseFloat(r.H, 64)
	if a.Class != "s-allowed" || r.Class != "s-policy" || math.Abs(ry+rh-ay) > 0.2 {
		t.Errorf("stack %+v not on %+v", r, a)
	}
	if len(p.Bands) != 1 || len(p.Lines) != 1 {
		t.Errorf("bands %d lines %d", len(p.Bands), len(p.Lines))
	}
}

func TestPlotAreaOnlyBendsWhereTheValueChanges(t *testing.T) {
	t.Parallel()
	vals := make([]float64, 1440)
	for i := 600; i < 660; i++ {
		vals[i] = 7
	}
	p := Chart{Kind: StackedArea, Columns: 1440, Series: []Series{{Name: "allowed", Class: "s-allowed", Values: vals}}}.Plot()
	if len(p.Areas) != 1 {
		t.Fatalf("%d areas", len(p.Areas))
	}
	if n := strings.Count(p.Areas[0].D, "V"); n > 4 {
		t.Errorf("path has %d vertical steps for one block: %s", n, p.Areas[0].D)
	}
}
