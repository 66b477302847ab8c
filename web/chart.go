package web

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ChartKind says how a Chart draws its series.
type ChartKind int

// Chart kinds.
const (
	// StackedBars draws one bar per column, the series stacked in order.
	StackedBars ChartKind = iota
	// StackedArea draws the series as stacked areas: for many columns (a
	// day of minutes), where bars would be thinner than a pixel.
	StackedArea
)

// Chart is a picture of counts over time columns (minutes, days), drawn as an
// SVG with a labelled y axis (with its unit), x ticks, shaded bands (such as
// degraded periods) and horizontal reference lines (such as an allotment).
// The handler fills it; Plot computes the geometry the template draws.
type Chart struct {
	// ID is the chart's data-testid and the prefix of its element ids.
	ID    string
	Title string
	// Summary says in words what the picture shows, for screen readers and
	// as the figure caption.
	Summary string
	// YUnit names what the y axis counts, such as "checks per minute".
	YUnit string
	// XLabel names the x axis, such as "time (UTC)".
	XLabel string
	Kind   ChartKind
	// Columns is the number of x positions; every series has that many
	// values.
	Columns int
	Series  []Series
	XTicks  []Tick
	Bands   []Band
	Lines   []RefLine
	// Empty, when not blank, is shown instead of the picture: what to do to
	// get data.
	Empty string
}

// Series is one stacked layer of a chart.
type Series struct {
	Name string
	// Class colours the series (a class of the dashboard's style sheet,
	// such as "s-allowed").
	Class  string
	Values []float64
}

// Tick labels an x column.
type Tick struct {
	Column int
	Label  string
}

// Band shades the columns [From, To).
type Band struct {
	From, To int
	Label    string
}

// RefLine is a horizontal line at Value, such as an allotment.
type RefLine struct {
	Value float64
	Label string
	Class string
}

// chartGeometry is a chart's drawing size and margins, in SVG user units.
// The picture scales to its container; each geometry is drawn at about its
// size on screen, so that its text keeps its size: the wide one on a
// laptop, the narrow one on a phone (the style sheet shows one of the two).
type chartGeometry struct {
	w, h, left, right, top, bottom float64
	// tickGap is the least room between two x tick labels; closer ticks are
	// left out.
	tickGap float64
}

var (
	wideChart   = chartGeometry{w: 1000, h: 260, left: 64, right: 16, top: 14, bottom: 44, tickGap: 60}
	narrowChart = chartGeometry{w: 340, h: 230, left: 46, right: 20, top: 12, bottom: 42, tickGap: 46}
)

// Plot is a Chart's geometry, ready to draw.
type Plot struct {
	ViewBox string
	// Plot area.
	X0, Y0, X1, Y1 string
	YTicks         []PlotTick
	XTicks         []PlotTick
	Rects          []PlotRect
	Areas          []PlotArea
	Bands          []PlotRect
	Lines          []PlotLine
	XLabelX        string
	XLabelY        string
	YLabelX        string
	YLabelY        string
}

// PlotTick is a tick mark with its label at (X, Y).
type PlotTick struct {
	X, Y string
	// Y2 ends the tick mark of an x tick.
	Y2    string
	Label string
}

// PlotRect is a rectangle of a bar or band.
type PlotRect struct {
	X, Y, W, H string
	Class      string
	Title      string
}

// PlotArea is a filled path.
type PlotArea struct {
	D     string
	Class string
	Title string
}

// PlotLine is a horizontal reference line with its label.
type PlotLine struct {
	X1, X2, Y      string
	Class, Label   string
	LabelX, LabelY string
}

// Plot computes the chart's geometry for a laptop's width.
func (c Chart) Plot() Plot { return c.plot(wideChart) }

// PlotNarrow computes the chart's geometry for a phone's width.
func (c Chart) PlotNarrow() Plot { return c.plot(narrowChart) }

func (c Chart) plot(g chartGeometry) Plot {
	chartLeft, chartTop := g.left, g.top
	plotW, plotH := g.w-g.left-g.right, g.h-g.top-g.bottom
	p := Plot{
		ViewBox: fmt.Sprintf("0 0 %s %s", num(g.w), num(g.h)),
		X0:      num(chartLeft), Y0: num(chartTop), X1: num(chartLeft + plotW), Y1: num(chartTop + plotH),
		XLabelX: num(chartLeft + plotW/2), XLabelY: num(g.h - 6),
		YLabelX: num(14), YLabelY: num(chartTop + plotH/2),
	}
	columns := max(c.Columns, 1)
	totals := make([]float64, columns)
	for _, s := range c.Series {
		for i := 0; i < columns && i < len(s.Values); i++ {
			totals[i] += s.Values[i]
		}
	}
	top := 0.0
	for _, t := range totals {
		top = math.Max(top, t)
	}
	for _, l := range c.Lines {
		top = math.Max(top, l.Value)
	}
	top, step := niceScale(top)
	y := func(v float64) float64 { return chartTop + plotH - v/top*plotH }
	columnW := plotW / float64(columns)
	x := func(i int) float64 { return chartLeft + float64(i)*columnW }

	for v := 0.0; v <= top+step/2; v += step {
		p.YTicks = append(p.YTicks, PlotTick{X: num(chartLeft - 6), Y: num(y(v)), Label: Compact(v)})
	}
	last := math.Inf(-1)
	for _, t := range c.XTicks {
		cx := x(t.Column)
		if c.Kind == StackedBars {
			cx += columnW / 2
		}
		if cx-last < g.tickGap {
			continue
		}
		last = cx
		p.XTicks = append(p.XTicks, PlotTick{X: num(cx), Y: num(chartTop + plotH), Y2: num(chartTop + plotH + 5), Label: t.Label})
	}
	for _, b := range c.Bands {
		from, to := max(b.From, 0), min(b.To, columns)
		if to <= from {
			continue
		}
		p.Bands = append(p.Bands, PlotRect{X: num(x(from)), Y: num(chartTop), W: num(math.Max(x(to)-x(from), 2)), H: num(plotH), Class: "band", Title: b.Label})
	}
	switch c.Kind {
	case StackedBars:
		gap := math.Min(columnW*0.15, 2)
		base := make([]float64, columns)
		for _, s := range c.Series {
			for i := 0; i < columns && i < len(s.Values); i++ {
				v := s.Values[i]
				if v <= 0 {
					continue
				}
				y0, y1 := y(base[i]), y(base[i]+v)
				base[i] += v
				p.Rects = append(p.Rects, PlotRect{
					X: num(x(i) + gap/2), Y: num(y1), W: num(math.Max(columnW-gap, 0.5)), H: num(math.Max(y0-y1, 0.5)),
					Class: s.Class, Title: s.Name + ": " + Count(int64(v)),
				})
			}
		}
	case StackedArea:
		base := make([]float64, columns)
		for _, s := range c.Series {
			next := make([]float64, columns)
			any := false
			for i := range columns {
				v := 0.0
				if i < len(s.Values) {
					v = s.Values[i]
				}
				any = any || v > 0
				next[i] = base[i] + v
			}
			if any {
				// The top edge left to right, then the bottom edge back,
				// each drawn as steps (a lone minute shows as a block), with
				// a vertex only where the height changes.
				var d strings.Builder
				fmt.Fprintf(&d, "M%s %s", num(x(0)), num(y(next[0])))
				for i := 1; i < columns; i++ {
					if next[i] != next[i-1] {
						fmt.Fprintf(&d, "H%sV%s", num(x(i)), num(y(next[i])))
					}
				}
				fmt.Fprintf(&d, "H%sV%s", num(x(columns)), num(y(base[columns-1])))
				for i := columns - 1; i > 0; i-- {
					if base[i] != base[i-1] {
						fmt.Fprintf(&d, "H%sV%s", num(x(i)), num(y(base[i-1])))
					}
				}
				fmt.Fprintf(&d, "H%s", num(x(0)))
				d.WriteString("Z")
				total := 0.0
				for i := range columns {
					total += next[i] - base[i]
				}
				p.Areas = append(p.Areas, PlotArea{D: d.String(), Class: s.Class, Title: s.Name + ": " + Count(int64(total)) + " in all"})
			}
			base = next
		}
	}
	for _, l := range c.Lines {
		ly := y(l.Value)
		// The label sits above its line, or below it when above would
		// leave the picture (a line at the top of the scale).
		labelY := ly - 6
		if labelY < 13 {
			labelY = ly + 16
		}
		p.Lines = append(p.Lines, PlotLine{
			X1: num(chartLeft), X2: num(chartLeft + plotW), Y: num(ly), Class: l.Class, Label: l.Label,
			LabelX: num(chartLeft + 8), LabelY: num(labelY),
		})
	}
	return p
}

// niceScale returns the top of a y axis that holds v, and the step of its
// four or five ticks: 1, 2, 2.5 or 5 times a power of ten.
func niceScale(v float64) (top, step float64) {
	if v <= 0 {
		return 4, 1
	}
	raw := v / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		step = m * mag
		if step >= raw {
			break
		}
	}
	if step < 1 {
		step = 1
	}
	return math.Ceil(v/step) * step, step
}

// num writes an SVG coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// HBars is a picture of a few named counts as horizontal bars with their
// values: refusals by layer, say.
type HBars struct {
	ID      string
	Title   string
	Summary string
	// Unit names what the values count, such as "refused requests".
	Unit  string
	Rows  []HBar
	Empty string
	// Width is the drawing's width in SVG units, about its width on screen
	// in pixels so that its text keeps its size: 560 (the default) for half
	// a page, 1000 for a whole one.
	Width int
}

// HBar is one bar.
type HBar struct {
	Label string
	Value int64
	Class string
}

// HBarsPlot is the geometry of HBars.
type HBarsPlot struct {
	ViewBox string
	Rows    []HBarRow
}

// HBarRow is one drawn bar.
type HBarRow struct {
	Label, Value  string
	LabelX, TextY string
	X, Y, W, H    string
	ValueX        string
	Class         string
}

// Plot computes the bars' geometry at h.Width.
func (h HBars) Plot() HBarsPlot {
	w := h.Width
	if w <= 0 {
		w = 560
	}
	return h.plot(w)
}

// PlotNarrow computes the bars' geometry for a phone's width.
func (h HBars) PlotNarrow() HBarsPlot { return h.plot(narrowHBars) }

// narrowHBars is the width of the bars drawn for a phone, about their
// width on its screen.
const narrowHBars = 340

func (h HBars) plot(w int) HBarsPlot {
	const rowH, labelW, valueW = 30, 120, 90
	top := int64(0)
	for _, r := range h.Rows {
		top = max(top, r.Value)
	}
	p := HBarsPlot{ViewBox: fmt.Sprintf("0 0 %d %d", w, max(len(h.Rows), 1)*rowH+8)}
	for i, r := range h.Rows {
		bw := 0.0
		if top > 0 {
			bw = float64(r.Value) / float64(top) * float64(w-labelW-valueW)
		}
		y := float64(i*rowH + 6)
		p.Rows = append(p.Rows, HBarRow{
			Label: r.Label, Value: Count(r.Value),
			LabelX: num(labelW - 8), TextY: num(y + rowH/2 + 1),
			X: num(labelW), Y: num(y + 4), W: num(math.Max(bw, 1)), H: num(rowH - 12),
			ValueX: num(labelW + bw + 8), Class: r.Class,
		})
	}
	return p
}

// Count writes n with thousands separators: 1,234,567.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Compact writes an axis value briefly: 950, 1.5k, 12k, 3M.
func Compact(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return trimZero(v/1e9) + "G"
	case a >= 1e6:
		return trimZero(v/1e6) + "M"
	case a >= 1e3:
		return trimZero(v/1e3) + "k"
	}
	return trimZero(v)
}

func trimZero(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}
