// Package doctest holds the tests that keep Tollgate's Markdown true. The
// links of the README, docs/ and every other tracked *.md: every relative
// link or image names a file of the repository, and every anchor a heading
// of its target, by GitHub's rules for heading ids. The README's quick
// starts: they change no plan every tenant on it shares, build what they
// run, keep Docker and the binary apart, create the first admin, and name
// docker-compose.yml's database as it is. The licence: LICENSE is the
// Apache License 2.0's standard text, and the README and the Go client's
// docs say so. It has no code of its own and imports nothing of Tollgate's.
package doctest
