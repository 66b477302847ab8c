package doctest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
	"gopkg.in/yaml.v3"
)

// quickStart is one "Quick start" section of the README: its prose and
// code in order (for what it says before a command), and its fenced code
// blocks, each a list of commands.
type quickStart struct {
	heading string
	text    string
	blocks  []codeBlock
}

// codeBlock is a fenced code block: its commands, a line each (a line
// ending in a backslash joined to the next, comments cut off), and the
// README line each starts on.
type codeBlock struct {
	cmds  []string
	lines []int
	// at is where the block starts in its section's text.
	at int
}

// comment is a shell comment: a # that starts a word, to the line's end.
var comment = regexp.MustCompile(`(^|\s)#.*$`)

// quickStarts reads the README's level-2 sections whose heading begins
// with "Quick start".
func quickStarts(src []byte) []quickStart {
	doc := markdown.Parser().Parse(text.NewReader(src))
	var qs []quickStart
	var cur *quickStart
	for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
		if h, ok := n.(*ast.Heading); ok && h.Level <= 2 {
			cur = nil
			if title := plainText(h, src); strings.HasPrefix(title, "Quick start") {
				qs = append(qs, quickStart{heading: title})
				cur = &qs[len(qs)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		var raw strings.Builder
		for i := 0; i < n.Lines().Len(); i++ {
			seg := n.Lines().At(i)
			raw.Write(seg.Value(src))
		}
		if fc, ok := n.(*ast.FencedCodeBlock); ok {
			b := codeBlock{at: len(cur.text)}
			first := bytes2line(src, fc)
			joined, start := "", 0
			for i := 0; i < fc.Lines().Len(); i++ {
				seg := fc.Lines().At(i)
				line := strings.TrimRight(string(seg.Value(src)), "\n")
				if joined == "" {
					start = first + i
				}
				if strings.HasSuffix(line, `\`) {
					joined += strings.TrimSuffix(line, `\`) + " "
					continue
				}
				cmd := strings.TrimSpace(comment.ReplaceAllString(joined+line, ""))
				joined = ""
				if cmd != "" {
					b.cmds = append(b.cmds, cmd)
					b.lines = append(b.lines, start)
				}
			}
			cur.blocks = append(cur.blocks, b)
		}
		cur.text += raw.String() + "\n"
	}
	return qs
}

// bytes2line is the README line of a fenced code block's first line of
// code.
func bytes2line(src []byte, fc *ast.FencedCodeBlock) int {
	if fc.Lines().Len() == 0 {
		return 0
	}
	return strings.Count(string(src[:fc.Lines().At(0).Start]), "\n") + 1
}

// composeDB is what docker-compose.yml says of its PostgreSQL: the
// account and database Tollgate uses, and the addresses that reach it.
type composeDB struct {
	user, password, db string
	// addrs are host:port pairs that reach it: the service's name on the
	// compose network, and each loopback port published to the machine.
	addrs []string
}

// readCompose reads the postgres service of a docker-compose.yml.
func readCompose(b []byte) (composeDB, error) {
	var f struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return composeDB{}, err
	}
	s, ok := f.Services["postgres"]
	if !ok {
		return composeDB{}, fmt.Errorf("no service postgres")
	}
	c := composeDB{user: s.Environment["POSTGRES_USER"], password: s.Environment["POSTGRES_PASSWORD"],
		db: s.Environment["POSTGRES_DB"], addrs: []string{"postgres:5432"}}
	for _, p := range s.Ports {
		// host_ip:host_port:container_port; only a loopback one is
		// offered to the machine's own commands.
		if parts := strings.Split(p, ":"); len(parts) == 3 && parts[2] == "5432" {
			c.addrs = append(c.addrs, parts[0]+":"+parts[1])
			if parts[0] == "127.0.0.1" {
				c.addrs = append(c.addrs, "localhost:"+parts[1])
			}
		}
	}
	return c, nil
}

// seededPlans are the plans the migrations insert: every tenant on one
// shares its limits.
func seededPlans(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	if err != nil {
		return nil, err
	}
	insert := regexp.MustCompile(`(?is)INSERT INTO plans\s*\([^)]*\)\s*VALUES(.*?);`)
	name := regexp.MustCompile(`\(\s*'([^']+)'`)
	var plans []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range insert.FindAllSubmatch(b, -1) {
			for _, n := range name.FindAllSubmatch(m[1], -1) {
				plans = append(plans, string(n[1]))
			}
		}
	}
	return plans, nil
}

var (
	// planChange is a command that changes a plan, which every tenant
	// on it shares.
	planChange = regexp.MustCompile(`\bplans\s+(set|set-price)\s+(\S+)`)
	// runsBinary runs the binary a build leaves in bin/.
	runsBinary = regexp.MustCompile(`(^|[\s|;&(])\./bin/tollgate\b`)
	// composeUp starts every service of docker-compose.yml, Tollgate's
	// included (one naming its services may start only PostgreSQL).
	composeUp = regexp.MustCompile(`\bdocker\s+compose\s+(--profile\s+\S+\s+)?up(\s+-[-\w]+)*\s*$`)
	// composeRun runs a command of Tollgate's image.
	composeRun = regexp.MustCompile(`\bdocker\s+compose\s+run\b.*\btollgate\b`)
	// serveBinary starts a Tollgate without the demo, which has no admin
	// of its own.
	serveBinary = regexp.MustCompile(`\btollgate\s+serve\b(\s*$|\s+[^-])`)
	// dbURL is a PostgreSQL URL.
	dbURL = regexp.MustCompile(`postgres(ql)?://[^\s'"]+`)
)

// quickStartProblems returns what is wrong with the README's quick starts,
// as "README.md:line: why":
//   - a command that changes a plan the migrations seed (issue 37 item 7:
//     `plans set pro` lowered every pro tenant's quota, the demo's too);
//   - ./bin/tollgate run before the section has said how it is built
//     (`make build`, or `make run` running);
//   - one code block that runs Tollgate both in Docker and as the binary,
//     two alternatives;
//   - a block that starts a server without the demo and creates no admin
//     (`admins create --email`), so the dashboard cannot be used;
//   - a PostgreSQL URL whose account, database or address is not the one
//     docker-compose.yml runs.
func quickStartProblems(readme []byte, plans []string, db composeDB) []string {
	var problems []string
	add := func(line int, format string, a ...any) {
		problems = append(problems, fmt.Sprintf("README.md:%d: ", line)+fmt.Sprintf(format, a...))
	}
	qs := quickStarts(readme)
	if len(qs) == 0 {
		return []string{"README.md: no section whose heading begins with Quick start"}
	}
	for _, q := range qs {
		for _, b := range q.blocks {
			docker, binary, server, admin := 0, 0, 0, false
			for i, cmd := range b.cmds {
				line := b.lines[i]
				if m := planChange.FindStringSubmatch(cmd); m != nil && slices.Contains(plans, m[2]) {
					add(line, "%q: `plans %s %s` changes the plan of every %s tenant, the demo's included; a quick start changes one tenant's limits, not a shared plan", q.heading, m[1], m[2], m[2])
				}
				if runsBinary.MatchString(cmd) && binary == 0 {
					binary = line
					if before := q.text[:b.at]; !strings.Contains(before, "make build") && !strings.Contains(before, "make run") && !slices.ContainsFunc(b.cmds[:i], func(c string) bool { return strings.Contains(c, "make build") }) {
						add(line, "%q runs ./bin/tollgate before saying how it is built (make build)", q.heading)
					}
				}
				if (composeUp.MatchString(cmd) || composeRun.MatchString(cmd)) && docker == 0 {
					docker = line
				}
				if (composeUp.MatchString(cmd) || serveBinary.MatchString(cmd)) && server == 0 {
					server = line
				}
				if strings.Contains(cmd, "admins create --email ") {
					admin = true
				}
				for _, u := range dbURL.FindAllString(cmd, -1) {
					if why := db.mismatch(u); why != "" {
						add(line, "%q: %s", q.heading, why)
					}
				}
			}
			if docker != 0 && binary != 0 {
				add(min(docker, binary), "%q runs Tollgate with docker compose and as ./bin/tollgate in one block: two ways, two blocks", q.heading)
			}
			if server != 0 && !admin {
				add(server, "%q starts a server but creates no admin (tollgate admins create --email …)", q.heading)
			}
		}
	}
	return problems
}

// mismatch says how the PostgreSQL URL u differs from the compose file's
// database, or returns "".
func (c composeDB) mismatch(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Sprintf("%s: %v", u, err)
	}
	pw, _ := p.User.Password()
	host, port, err := net.SplitHostPort(p.Host)
	if err != nil {
		host, port = p.Host, "5432"
	}
	switch addr := host + ":" + port; {
	case p.User.Username() != c.user || pw != c.password:
		return fmt.Sprintf("%s: account %s:%s, but docker-compose.yml's PostgreSQL has %s:%s", u, p.User.Username(), pw, c.user, c.password)
	case strings.TrimPrefix(p.Path, "/") != c.db:
		return fmt.Sprintf("%s: database %q, but docker-compose.yml's is %q", u, strings.TrimPrefix(p.Path, "/"), c.db)
	case !slices.Contains(c.addrs, addr):
		return fmt.Sprintf("%s: address %s, but docker-compose.yml's PostgreSQL is reached at %s", u, addr, strings.Join(c.addrs, " or "))
	}
	return ""
}

// TestQuickStarts holds the README's quick starts to quickStartProblems'
// rules, and to naming make build, the target that builds ./bin/tollgate.
func TestQuickStarts(t *testing.T) {
	t.Parallel()
	r := gitRepo(t)
	readme, err := os.ReadFile(filepath.Join(r.root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := seededPlans(filepath.Join(r.root, "migrations"))
	if err != nil || len(plans) == 0 {
		t.Fatalf("plans of the migrations: %v, %v", plans, err)
	}
	b, err := os.ReadFile(filepath.Join(r.root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := readCompose(b)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, p := range quickStartProblems(readme, plans, db) {
		t.Error(p)
	}
	makefile, err := os.ReadFile(filepath.Join(r.root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^build:`).Match(makefile) {
		t.Error("Makefile: no target build")
	}
	if !strings.Contains(string(readme), "make build") {
		t.Error("README.md never names make build, which builds ./bin/tollgate")
	}
}

// TestQuickStartProblemsFound holds quickStartProblems to what it must
// find, in a README of its own.
func TestQuickStartProblemsFound(t *testing.T) {
	t.Parallel()
	readme := "# T\n\n## Quick start: an operator\n\nWith `make run` going:\n\n" +
		"```sh\n./bin/tollgate plans set pro \\\n  --quota-per-minute 6000\n./bin/tollgate plans list   # plans set pro\n" +
		"./bin/tollgate plans set-price starter price_1\n```\n\n" +
		"## Quick start: a self-hoster\n\n" +
		"```sh\nexport DATABASE_URL=postgres://tollgate:secret@db:5432/tollgate\n./bin/tollgate serve\n" +
		"docker compose up --build\n```\n\n" +
		"```sh\nmake build\ndocker compose up -d --wait postgres\nexport DATABASE_URL='postgres://tollgate:tollgate@127.0.0.1:5433/tollgate?sslmode=disable'\n" +
		"./bin/tollgate serve\nread -rs P && printf '%s\\n' \"$P\" | ./bin/tollgate admins create --email ops@example.com\n```\n\n" +
		"## Other\n\n```sh\n./bin/tollgate plans set pro --quota-per-minute 1\n```\n"
	db := composeDB{user: "tollgate", password: "tollgate", db: "tollgate", addrs: []string{"postgres:5432", "127.0.0.1:5433"}}
	got := quickStartProblems([]byte(readme), []string{"starter", "pro"}, db)
	want := []string{
		`README.md:8: "Quick start: an operator": ` + "`plans set pro` changes the plan of every pro tenant, the demo's included; a quick start changes one tenant's limits, not a shared plan",
		`README.md:11: "Quick start: an operator": ` + "`plans set-price starter` changes the plan of every starter tenant, the demo's included; a quick start changes one tenant's limits, not a shared plan",
		`README.md:17: "Quick start: a self-hoster": postgres://tollgate:secret@db:5432/tollgate: account tollgate:secret, but docker-compose.yml's PostgreSQL has tollgate:tollgate`,
		`README.md:18: "Quick start: a self-hoster" runs ./bin/tollgate before saying how it is built (make build)`,
		`README.md:18: "Quick start: a self-hoster" runs Tollgate with docker compose and as ./bin/tollgate in one block: two ways, two blocks`,
		`README.md:18: "Quick start: a self-hoster" starts a server but creates no admin (tollgate admins create --email …)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\ngot  %q\nwant %q", got, want)
	}
	if got := db.mismatch("postgres://tollgate:tollgate@localhost:5432/tollgate"); got == "" {
		t.Error("localhost:5432 passed for a database published on 127.0.0.1:5433")
	}
	if got := db.mismatch("postgres://tollgate:tollgate@postgres:5432/other"); got == "" {
		t.Error("database other passed for tollgate")
	}
}

// TestReadCompose reads the repository's docker-compose.yml's database.
func TestReadCompose(t *testing.T) {
	t.Parallel()
	db, err := readCompose([]byte("services:\n  postgres:\n    environment:\n      POSTGRES_USER: u\n      POSTGRES_PASSWORD: p\n      POSTGRES_DB: d\n    ports:\n      - \"127.0.0.1:5433:5432\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := composeDB{"u", "p", "d", []string{"postgres:5432", "127.0.0.1:5433", "localhost:5433"}}
	if db.user != want.user || db.password != want.password || db.db != want.db || !slices.Equal(db.addrs, want.addrs) {
		t.Errorf("got %+v, want %+v", db, want)
	}
}
