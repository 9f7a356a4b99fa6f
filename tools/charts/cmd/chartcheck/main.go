// Command chartcheck holds the checks of make charts-check that helm itself
// does not make:
//
//	chartcheck strict [-stack] [-skip-group G]... [FILE]...
//	    decode rendered manifests (files, or stdin) strictly against the
//	    k8s.io/api types and check how the objects refer to each other
//	chartcheck env -helm BIN -chart DIR -binary BIN -container NAME [-values FILE]... [-runtime NAMES]
//	    prove the chart can set every environment variable the binary's
//	    --help lists
//	chartcheck env-values -name VAR | -all CONTAINER [FILE]...
//	    print the value of VAR in every container of a render (files, or
//	    stdin), one a line (scripts/dev-stack lists its pylon backends so),
//	    or every variable of a container as NAME=VALUE
//	chartcheck values-doc [-write] -doc FILE CHART...
//	    check (or rewrite) the values tables of docs/deploy.md against
//	    the charts' values.yaml comments
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "strict":
		err = runStrict(os.Args[2:], os.Stdin, os.Stdout)
	case "env":
		err = runEnv(os.Args[2:], os.Stdout)
	case "env-values":
		err = runEnvValues(os.Args[2:], os.Stdin, os.Stdout)
	case "values-doc":
		err = runValuesDoc(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartcheck "+os.Args[1]+":", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: chartcheck strict|env|env-values|values-doc [flags] (see the package comment)")
	os.Exit(2)
}
