// Command citecheck fails when the repository cites something a reader of
// the repository cannot follow (see package citecheck for the rules). make
// lint runs it over the whole tree:
//
//	go run ./internal/cmd/citecheck -root ..
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/stargate-router/stargate/pkg/internal/citecheck"
)

func main() {
	root := flag.String("root", ".", "repository root to check")
	flag.Parse()
	problems, err := citecheck.Check(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "citecheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "citecheck: %d citation(s) a reader of the repository cannot follow\n", len(problems))
		os.Exit(1)
	}
	fmt.Println("citecheck: clean")
}
