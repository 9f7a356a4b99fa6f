// Package citecheck finds citations in the repository that a reader cannot
// follow: links into the design notes that do not ship with the project,
// section numbers of documents that are not here, and links to files or
// headings of this repository that do not exist. It reads files only; the
// command pkg/internal/cmd/citecheck runs it over the tree in make lint.
//
// The rules are deliberately simple, so that what fails is obvious:
//   - nothing may point into the design notes the code was first written
//     from, which sit beside the repository in a folder named shared and
//     do not ship with it;
//   - a section sign followed by a number is a citation of some document's
//     numbering; it is allowed only after "RFC <n>", whose numbering is
//     public;
//   - every mention of a Markdown file (README.md, or a file under docs/
//     with an anchor) must name a file of the repository, and its anchor a
//     heading of that file; in Go source only comments are read for this,
//     since a file name in a string is data;
//   - every relative Markdown link must name an existing file.
package citecheck
