package doctest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// apacheLicense are the SHA-256 digests of the Apache License 2.0's
// standard text: as the Apache Software Foundation publishes it
// (LICENSE-2.0.txt, which opens with an empty line), and the same without
// that line, as most repositories carry it.
var apacheLicense = map[string]bool{
	"cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30": true,
	"c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4": true,
}

// TestLicense: Tollgate is released under the Apache License 2.0. LICENSE
// at the repository's root is the standard text, whole and unmodified
// (appendix included), and the README, the Go client's package doc and its
// section of docs/api.md say so.
func TestLicense(t *testing.T) {
	t.Parallel()
	r := gitRepo(t)
	if !r.files["LICENSE"] {
		t.Fatal("no LICENSE at the repository's root")
	}
	text, err := os.ReadFile(filepath.Join(r.root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(strings.TrimLeft(string(text), "\n "), "Apache License\n                           Version 2.0, January 2004\n") {
		t.Errorf("LICENSE does not open with the Apache License 2.0's header: %.80q", text)
	}
	sum := sha256.Sum256(text)
	if got := hex.EncodeToString(sum[:]); !apacheLicense[got] {
		t.Errorf("LICENSE (SHA-256 %s, %d bytes) is not the Apache License 2.0's standard text", got, len(text))
	}

	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(r.root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := read("README.md")
	section := regexp.MustCompile(`(?s)\n## License\n(.*)$`).FindStringSubmatch(readme)
	switch {
	case section == nil:
		t.Error(`README.md has no "## License" section`)
	case strings.Contains(section[1], "\n## "):
		t.Error(`README.md's "## License" section is not its last`)
	case !strings.Contains(section[1], "[Apache License 2.0](LICENSE)"):
		t.Errorf("README.md's License section does not name the Apache License 2.0 with a link to LICENSE: %s", section[1])
	}
	if doc := read("client/doc.go"); !strings.Contains(strings.Join(strings.Fields(doc), " "), "released under the Apache License 2.0") {
		t.Error("the Go client's package doc (client/doc.go) does not name its licence")
	}
	if api := read("docs/api.md"); !regexp.MustCompile(`(?s)## The Go client\n\n[^#]*Apache License 2\.0`).MatchString(api) {
		t.Error("docs/api.md's section on the Go client does not name its licence")
	}
}
