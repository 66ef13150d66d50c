// dashboard-check decodes each dashboard JSON file named on the command line with the Grafana
// Foundation SDK's dashboard model (generated from Grafana's dashboard schema): strictly, so an
// unknown or mistyped field, an unknown panel type's options or a missing required field is an
// error, then validated. It prints one line per file and exits 1 if any file fails.
package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func check(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var board dashboard.Dashboard
	if err := failure(board.UnmarshalJSONStrict(raw)); err != nil {
		return err
	}
	return failure(board.Validate())
}

// failure: the SDK returns an empty cog.BuildErrors (a non-nil error value) when nothing failed.
func failure(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}

func main() {
	// Panel options and field configs decode into each panel plugin's own model.
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Printf("FAIL %s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("OK %s\n", path)
	}
	if failed || len(os.Args) < 2 {
		os.Exit(1)
	}
}
