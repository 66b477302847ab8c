// Package doctest holds the test that keeps the links of Tollgate's
// Markdown (the README, docs/ and every other tracked *.md) true: every
// relative link or image names a file of the repository, and every anchor
// a heading of its target, by GitHub's rules for heading ids; and the test
// that keeps the licence true: LICENSE is the Apache License 2.0's
// standard text, and the README and the Go client's docs say so. It has no
// code of its own and imports nothing of Tollgate's.
package doctest
