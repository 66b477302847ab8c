package doctest

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// markdown parses as GitHub does for what links need: CommonMark with
// GitHub's tables (so a link in a table cell is a link), strikethrough and
// autolinks.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// repo is a repository's files: root on disk, and the slash-separated
// paths of the files git tracks or would track (ignored files are not part
// of it, so a link to one is broken on GitHub too).
type repo struct {
	root  string
	files map[string]bool
	dirs  map[string]bool
}

func newRepo(root string, files []string) repo {
	r := repo{root: root, files: map[string]bool{}, dirs: map[string]bool{"": true}}
	for _, f := range files {
		r.files[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			r.dirs[d] = true
		}
	}
	return r
}

// gitRepo lists the repository this test runs in with git: tracked files,
// and untracked ones that are not ignored (a page being written counts).
func gitRepo(t *testing.T) repo {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	root := strings.TrimSpace(string(top))
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		// A file deleted from the work tree but still in the index is no
		// target for a link.
		if _, err := os.Stat(filepath.Join(root, f)); f != "" && err == nil {
			files = append(files, f)
		}
	}
	return newRepo(root, files)
}

// markdownFiles are the Markdown files whose links are checked: every *.md
// of the repository outside node_modules.
func (r repo) markdownFiles() []string {
	var md []string
	for f := range r.files {
		if strings.HasSuffix(strings.ToLower(f), ".md") && !slices.Contains(strings.Split(f, "/"), "node_modules") {
			md = append(md, f)
		}
	}
	return md
}

// link is one link or image of a Markdown file.
type link struct {
	dest string
	line int
}

// parse reads a Markdown file: its links and images, and its headings'
// anchors by GitHub's rules.
func parse(src []byte) (links []link, anchors map[string]bool) {
	doc := markdown.Parser().Parse(text.NewReader(src))
	anchors = map[string]bool{}
	seen := map[string]int{}
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			anchors[uniqueSlug(slug(plainText(n, src)), seen)] = true
		case *ast.Link:
			links = append(links, link{string(n.Destination), lineOf(n, src)})
		case *ast.Image:
			links = append(links, link{string(n.Destination), lineOf(n, src)})
		}
		return ast.WalkContinue, nil
	})
	return links, anchors
}

// plainText is a heading's text as GitHub's slugger sees it: the text of
// every inline, code spans included, markup left out.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// slug is GitHub's id of a heading (github-slugger): lower case, every
// character dropped but letters, marks, digits, connector punctuation
// (such as _), hyphens and spaces, and each space a hyphen.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// uniqueSlug numbers a slug met before, as GitHub does: the second
// "usage" is "usage-1".
func uniqueSlug(s string, seen map[string]int) string {
	n, ok := seen[s]
	seen[s] = n + 1
	if !ok {
		return s
	}
	for {
		c := s + "-" + strconv.Itoa(n)
		if _, taken := seen[c]; !taken {
			seen[c] = 1
			return c
		}
		n++
	}
}

// lineOf is the line of the first text at or under n (links and images
// have no position of their own), or 0.
func lineOf(n ast.Node, src []byte) int {
	for c := n; c != nil; c = c.FirstChild() {
		if t, ok := c.(*ast.Text); ok {
			return bytes.Count(src[:t.Segment.Start], []byte("\n")) + 1
		}
	}
	if p := n.Parent(); p != nil && p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
		return bytes.Count(src[:p.Lines().At(0).Start], []byte("\n")) + 1
	}
	return 0
}

// lineAnchor is a link to lines of a file that is not Markdown (#L10,
// #L10-L20), which GitHub's file view answers.
var lineAnchor = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)

// page is what a Markdown file holds for links: its links and images,
// and its headings' anchors.
type page struct {
	links   []link
	anchors map[string]bool
}

// check returns every broken link of the repository's Markdown files, as
// "file:line: why".
func (r repo) check() []string {
	pages := map[string]*page{}
	read := func(f string) (*page, error) {
		if p, ok := pages[f]; ok {
			return p, nil
		}
		src, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		l, a := parse(src)
		pages[f] = &page{l, a}
		return pages[f], nil
	}
	var problems []string
	for _, f := range r.markdownFiles() {
		p, err := read(f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		for _, l := range p.links {
			if why := r.checkLink(f, l.dest, read); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", f, l.line, why))
			}
		}
	}
	slices.Sort(problems)
	return problems
}

// checkLink says why dest, a link in the Markdown file f, is broken, or
// returns "" when it resolves. A URL with a scheme or a host leaves the
// repository and is not checked.
func (r repo) checkLink(f, dest string, read func(string) (*page, error)) string {
	u, err := url.Parse(dest)
	switch {
	case err != nil:
		return fmt.Sprintf("link %q: %v", dest, err)
	case u.Scheme != "" || u.Host != "":
		return ""
	case dest == "":
		return "empty link"
	}
	target := f
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			target = path.Clean(strings.TrimPrefix(u.Path, "/"))
		} else {
			target = path.Join(path.Dir(f), u.Path)
		}
		if target == ".." || strings.HasPrefix(target, "../") {
			return fmt.Sprintf("link %q leaves the repository", dest)
		}
		if target == "." {
			target = ""
		}
		if !r.files[target] && !r.dirs[target] {
			return fmt.Sprintf("link %q: no file %s in the repository", dest, target)
		}
	}
	if u.Fragment == "" {
		return ""
	}
	if !strings.HasSuffix(strings.ToLower(target), ".md") {
		if r.files[target] && lineAnchor.MatchString(u.Fragment) {
			return ""
		}
		return fmt.Sprintf("link %q: anchor #%s in %s, which is no Markdown file", dest, u.Fragment, target)
	}
	p, err := read(target)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	if !p.anchors[u.Fragment] {
		return fmt.Sprintf("link %q: %s has no heading whose anchor is #%s", dest, target, u.Fragment)
	}
	return ""
}

// TestMarkdownLinksResolve fails when a relative link or image of the
// repository's Markdown names no file of the repository, or its anchor no
// heading of its target.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	r := gitRepo(t)
	if len(r.markdownFiles()) == 0 {
		t.Fatal("no Markdown files found")
	}
	for _, p := range r.check() {
		t.Error(p)
	}
}

// TestSlug holds slug to GitHub's ids of the headings of this kind.
func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ heading, want string }{
		{"The two commands", "the-two-commands"},
		{"What is exact, and what is taken in advance", "what-is-exact-and-what-is-taken-in-advance"},
		{"Quick start: a tenant's developer", "quick-start-a-tenants-developer"},
		{"Faults: what Tollgate promises, and the suite that holds it", "faults-what-tollgate-promises-and-the-suite-that-holds-it"},
		{"`TOLLGATE_PEPPER` and Stripe", "tollgate_pepper-and-stripe"},
		{"Where counters live (memory / Redis)", "where-counters-live-memory--redis"},
		{"Größe — 2×", "größe--2"},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			t.Parallel()
			_, anchors := parse([]byte("# " + tc.heading + "\n"))
			if !anchors[tc.want] || len(anchors) != 1 {
				t.Errorf("anchors of %q: got %v, want %q", tc.heading, anchors, tc.want)
			}
		})
	}
}

// TestCheckFindsBrokenLinks holds check to what it must find, on a small
// repository of its own.
func TestCheckFindsBrokenLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{
		"README.md": "# Tollgate\n\n## Usage\n\n## Usage\n\n" +
			"[ok](docs/api.md#the-api) [ok](#usage-1) [ok](docs/) [ok](main.go#L3) ![ok](docs/a.png)\n" +
			"[ok](https://example.com/x#y) [ok](<docs/api.md>)\n\n" +
			"| a | b |\n| - | - |\n| [gone](docs/gone.md) | x |\n\n" +
			"[bad anchor](docs/api.md#nothing) [bad self](#usage-2) ![gone](docs/b.png)\n" +
			"[out](../x.md) [code anchor](main.go#top) [ref][r]\n\n[r]: docs/ref.md\n",
		"docs/api.md": "# The API\n",
		"docs/a.png":  "",
		"main.go":     "package main\n",
	}
	var names []string
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	got := newRepo(root, names).check()
	want := []string{
		`README.md:12: link "docs/gone.md": no file docs/gone.md in the repository`,
		`README.md:14: link "#usage-2": README.md has no heading whose anchor is #usage-2`,
		`README.md:14: link "docs/api.md#nothing": docs/api.md has no heading whose anchor is #nothing`,
		`README.md:14: link "docs/b.png": no file docs/b.png in the repository`,
		`README.md:15: link "../x.md" leaves the repository`,
		`README.md:15: link "docs/ref.md": no file docs/ref.md in the repository`,
		`README.md:15: link "main.go#top": anchor #top in main.go, which is no Markdown file`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("check:\ngot  %q\nwant %q", got, want)
	}
}
