package browsertest

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/chromedp/chromedp"
)

// axeSource is axe-core 4.14.1's axe.min.js, from npm's axe-core package
// (integrity sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==),
// unchanged; its licence (MPL-2.0) is beside it.
//
//go:embed testdata/axe-core/axe.min.js
var axeSource string

// widths are the viewports every page is checked at: a phone's (390 px,
// an iPhone 12 to 15) and a laptop's.
var widths = []int64{390, 1280}

// surveyPage is one page the survey opens: its path, an element that shows
// it has loaded, and the name of its screenshots.
type surveyPage struct {
	name, path, waitFor string
}

// axeViolation is what the test reports of one axe-core violation.
type axeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
}

// axeRun runs axe-core's default rules on the document and returns the
// violations. The dashboard's Content-Security-Policy allows no script:
// the DevTools protocol's evaluation is not the page's script and is not
// subject to it.
const axeRun = `(async () => {
	const r = await axe.run(document, {resultTypes: ["violations"]});
	return r.violations.map(v => ({id: v.id, impact: v.impact || "", help: v.help,
		targets: v.nodes.slice(0, 5).map(n => n.target.join(" "))}));
})()`

// survey opens every page at each width: no page may be wider than the
// viewport (it would scroll sideways), axe-core must find nothing, and each
// page leaves a screenshot NAME-WIDTH.png. It returns the violations found,
// by page and width, so that a failing run lists them all at once.
func (b *browser) survey(pages []surveyPage) {
	b.t.Helper()
	defer b.do("back to the laptop width", chromedp.EmulateViewport(1280, 900))
	for _, w := range widths {
		b.do(fmt.Sprintf("viewport %d px", w), chromedp.EmulateViewport(w, 900))
		for _, p := range pages {
			b.open(p.path, p.waitFor)
			// The width the page may take is the viewport's less the
			// vertical scroll bar: clientWidth.
			fit, err := chromedp.Run(b.ctx, chromedp.Evaluate[[2]int64](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
			if err != nil {
				b.t.Fatalf("scroll width of %s: %v", p.path, err)
			}
			if sw, cw := fit[0], fit[1]; sw > cw || cw > w {
				b.t.Errorf("%s at %d px: the page is %d px wide in a window %d px wide, and scrolls sideways%s", p.path, w, sw, cw, b.widest(cw))
			}
			for _, v := range b.axe() {
				b.t.Errorf("%s at %d px: axe-core %s (%s): %s, at %s", p.path, w, v.ID, v.Impact, v.Help, strings.Join(v.Targets, "; "))
			}
			b.screenshot(fmt.Sprintf("%s-%d", p.name, w))
		}
	}
}

// axe injects axe-core into the document, once per document, and runs it.
func (b *browser) axe() []axeViolation {
	b.t.Helper()
	loaded, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`typeof axe === "object"`))
	if err != nil {
		b.t.Fatalf("axe-core: %v", err)
	}
	if !loaded {
		if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](axeSource+"\n;true", chromedp.EvalAsValue)); err != nil {
			b.t.Fatalf("inject axe-core: %v", err)
		}
	}
	vs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]axeViolation](axeRun, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("run axe-core: %v", err)
	}
	return vs
}

// widest names the elements that reach past the viewport's right edge, for
// the failure message: the deepest few, which are the ones to fix.
func (b *browser) widest(w int64) string {
	js := fmt.Sprintf(`Array.from(document.querySelectorAll("body *"))
		.filter(e => e.getBoundingClientRect().right > %d + 1 && !Array.from(e.children).some(c => c.getBoundingClientRect().right > %d + 1))
		.slice(0, 6).map(e => e.tagName.toLowerCase() + (e.className && typeof e.className === "string" ? "." + e.className.split(" ").join(".") : "") +
			" (" + Math.round(e.getBoundingClientRect().right) + " px)")`, w, w)
	names, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](js))
	if err != nil || len(names) == 0 {
		return ""
	}
	return "; past the edge: " + strings.Join(names, ", ")
}
