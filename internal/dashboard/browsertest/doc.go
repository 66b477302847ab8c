// Package browsertest drives Tollgate's pages in a real headless Chromium
// (chromedp, Debian's chromium at /usr/bin/chromium; scripts/deps.sh
// chromium installs it): it builds and starts `tollgate serve` on a database
// of its own. In the operators' dashboard it signs in, is refused and
// rate-limited on wrong passwords, opens every page, and through the forms
// creates a tenant, changes a tenant's limit, creates a named key with an
// expiry, unlocks a subject, revokes a key and deletes a policy (both asked
// first on a page of their own) and adds an admin, seeing the API apply
// each; a form that was not saved must land with its error in view. It
// follows the home page's link to the API reference (/docs) and sees Redoc
// draw every operation with no request leaving Tollgate and nothing refused
// by the page's Content-Security-Policy. It saves a screenshot of each page
// in the repository's git-ignored screenshots/ folder (TOLLGATE_SCREENSHOTS
// names another). It has no code of its own; the tests are browser_test.go
// and apidocs_test.go.
package browsertest
