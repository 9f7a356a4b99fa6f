// Command configdoc writes docs/configuration.md from the --help of the
// deployable binaries in a bin directory, or with -check fails when the
// file differs from what they print (see package configdoc). make
// config-doc and make config-doc-check run it from the pkg module with -bin
// and -out pointing at the repository's bin directory and
// docs/configuration.md.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/stargate-router/stargate/pkg/internal/configdoc"
)

// binaries are the deployable binaries, in the order of the reference.
var binaries = []string{"gateway", "hub", "pylon", "mock-engine"}

func main() {
	bin := flag.String("bin", "bin", "directory holding the built binaries")
	out := flag.String("out", "docs/configuration.md", "the reference to write or check")
	check := flag.Bool("check", false, "fail if -out differs from the binaries' flags instead of writing it")
	flag.Parse()
	if err := run(*bin, *out, *check); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}

func run(bin, out string, check bool) error {
	var bins []configdoc.Binary
	for _, name := range binaries {
		help, err := exec.Command(filepath.Join(bin, name), "--help").Output() //nolint:gosec // G204: our own binaries from -bin
		if err != nil {
			return fmt.Errorf("%s --help: %w", name, err)
		}
		b, err := configdoc.Parse(name, bytes.NewReader(help))
		if err != nil {
			return err
		}
		bins = append(bins, b)
	}
	// Defaults taken from the machine (hub and pylon ids default to the
	// host name) are written as what they stand for.
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	var doc bytes.Buffer
	if err := configdoc.Render(&doc, bins, map[string]string{host: "the host name"}); err != nil {
		return err
	}
	if !check {
		return os.WriteFile(out, doc.Bytes(), 0o644) //nolint:gosec // G306: a document of the repository
	}
	have, err := os.ReadFile(out) //nolint:gosec // G304: the path the caller named
	if err != nil {
		return err
	}
	if !bytes.Equal(have, doc.Bytes()) {
		return fmt.Errorf("%s is out of date with the binaries' flags: run make config-doc and commit it", out)
	}
	fmt.Println("configdoc:", out, "is current")
	return nil
}
