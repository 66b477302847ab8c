// Package browsertest drives Tollgate's pages in a real headless Chromium
// (chromedp, Debian's chromium at /usr/bin/chromium; scripts/deps.sh
// chromium installs it): it builds and starts `tollgate serve` on a database
// of its own. In the operators' dashboard it signs in, is refused and
// rate-limited on wrong passwords, opens every page, changes a tenant's
// limit and revokes a key through the forms and sees the API apply both. It
// follows the home page's link to the API reference (/docs) and sees Redoc
// draw every operation with no request leaving Tollgate and nothing refused
// by the page's Content-Security-Policy. It saves a screenshot of each page
// in the repository's git-ignored screenshots/ folder (TOLLGATE_SCREENSHOTS
// names another). It has no code of its own; the tests are browser_test.go
// and apidocs_test.go.
package browsertest
