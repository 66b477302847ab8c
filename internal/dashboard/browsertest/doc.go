// Package browsertest drives the operators' dashboard in a real headless
// Chromium (chromedp, Debian's chromium at /usr/bin/chromium; scripts/deps.sh
// chromium installs it): it builds and starts `tollgate serve` on a database
// of its own, signs in, is refused and rate-limited on wrong passwords,
// opens every page, changes a tenant's limit and revokes a key through the
// forms and sees the API apply both, and saves a screenshot of each page in
// the repository's git-ignored screenshots/ folder (TOLLGATE_SCREENSHOTS
// names another). It has no code of its own; the test is browser_test.go.
package browsertest
